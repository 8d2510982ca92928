//! Blocks kept on disk, behind the in-memory cache: shared by the files of a
//! process and by processes using the same directory, bounded in bytes.
//!
//! Each block is one file, written whole to a temporary name and renamed
//! into place, so a reader sees a block entirely or not at all, even when the
//! writer is killed midway. Each carries its owner (a digest of the remote
//! file's version, the block size and index) and a CRC-32C of its bytes
//! ([`format`](mod@format)), checked on every read: a block that does not
//! match is deleted and fetched again. A directory that cannot be written, a
//! full disk or a directory deleted underneath are never errors for a read: the
//! bytes come from the network, with a `warn` event.
//!
//! Everything in the directory is the user's alone, and nothing planted in
//! it is followed ([`private`]); one process fetches a block while the
//! others wait for it ([`lock`]); blocks are written off the fetch path
//! ([`writer`]), and before the process exits ([`at_exit`]); each file's
//! last version seen is recorded ([`record`]); a directory is open once in
//! a process, whoever opens it ([`shared`]); nothing of a URL is written,
//! only digests of it ([`digest`]).

mod at_exit;
mod digest;
mod format;
mod lock;
mod private;
mod record;
mod shared;
mod tier;
mod writer;

pub(crate) use record::{FirstOpen, Name, Recalled, name, version};

use std::collections::VecDeque;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant, SystemTime};

use crate::sync::Mutex;
use crate::wait::Stop;

use self::digest::Digest;
use self::format::Owner;
pub(crate) use self::lock::FetchLock;
pub(crate) use self::tier::DiskTier;
use self::writer::{WriteFile, Writer};

/// Eviction frees space down to this fraction of the capacity, so that it
/// does not run again at the next block.
const EVICT_TO: f64 = 0.9;

/// Temporary files older than this were left by a process that died while
/// writing them.
const STALE_TEMPORARY: Duration = Duration::from_secs(3600);

/// A directory of cached blocks that outlives the process: a second run of a
/// program, or another program reading the same files, finds the blocks the
/// first fetched.
///
/// Put it behind a file's memory cache with
/// [`Builder::disk_cache`](crate::options::Builder::disk_cache): a read looks in
/// memory, then on disk, then fetches. A block on disk belongs to one
/// version of one remote file — the file (its URL's scheme, host, port,
/// path and query without credential parameters, below, or the builder's
/// [`cache_key`](crate::options::Builder::cache_key)), its validator (a strong ETag,
/// or else `Last-Modified`) and its size — so a changed file never receives
/// its old bytes, nor a file another's. A file with no validator is not
/// cached on disk.
///
/// The query takes part because an ETag names one version of one resource,
/// and the query is part of the resource: `download?id=1` and
/// `download?id=2` may carry one ETag (nginx's is the modification time and
/// the size) and never share a block. Only parameters known to be
/// credentials are left out, so a presigned URL whose signature changes
/// from one open to the next finds the blocks every earlier one fetched; a
/// token under a name no rule knows makes a new name, whose blocks are
/// fetched again. A [`cache_key`](crate::options::Builder::cache_key) names a file
/// whatever its URL. The same name also names the record of the version
/// seen last, which lets an open cost one request with no body (or none,
/// see [`revalidate_after`](crate::options::Builder::revalidate_after) and
/// [`immutable`](crate::options::Builder::immutable)) — without a request only with
/// the credential parameters it was confirmed with. A URL that redirects
/// is the file it reached: another target is another version.
///
/// A version on disk is confirmed by a `304 Not Modified` that carries its
/// strong ETag, or by a response whose date and size are its own (a
/// version known by `Last-Modified` alone is confirmed only by its first
/// block, fetched again: servers answer `If-Modified-Since` with `304`
/// whenever the file is not newer, a file restored with an older date
/// too). A `412 Precondition Failed`, or an answer with another validator
/// or size, forgets the version — its record and its blocks — so the next
/// open reads the file as it is now.
///
/// The parameters left out: `access_token` (OAuth 2), `token`, `api_key`, `apikey`,
/// `X-Amz-*` and `X-Goog-*` (S3, GCS) always; in a URL that carries a
/// signature (`X-Amz-Signature`, `X-Goog-Signature`, `Signature` or
/// `sig`), also `AWSAccessKeyId`, `GoogleAccessId`, `Signature`, `Expires`
/// (S3 and GCS query authentication, version 2), `Policy`, `Key-Pair-Id`
/// (CloudFront) and the fields of an Azure SAS (`sv`, `ss`, `srt`, `sp`,
/// `se`, `st`, `spr`, `sig`, `sr`, `si`, `sdd`, `ses`, `skoid`, `sktid`,
/// `skt`, `ske`, `sks`, `skv`, `saoid`, `suoid`, `scid`).
///
/// What the directory holds: the bytes of the blocks read (in clear: the
/// directory is as private as the files it caches, see below), SHA-256
/// digests, sizes, block sizes and indices, CRC-32Cs, modification times
/// (for eviction and [`revalidate_after`](crate::options::Builder::revalidate_after)),
/// how long the server said a version stays good (its `Cache-Control`,
/// sealed with the validator),
/// and, in a lock file while a block is fetched, the host's name, the PID
/// namespace and the process id. Directories and files are named by
/// digests, a block file's header carries the digest of its version (of
/// the file's name, validator and size), and a file's record (`files/`)
/// holds the validator and size sealed with a key made of the file's name:
/// the directory alone does not give them back, only with the URL.
///
/// What it never holds: any text of a URL — its host, path or query
/// (tokens, signatures, keys, whatever their names), its user information
/// — nor a header's name or value, nor a cache key, nor an ETag or a date
/// in clear. A digest gives nothing of what it was made of back (SHA-256 is
/// preimage resistant); someone with the directory can only tell whether a
/// URL they already know was read. Directories and
/// records of crate versions that wrote URLs in clear (the first layout)
/// are deleted at the first open of the directory by a process of this
/// version.
///
/// Several processes may use one directory at once, and one block is
/// fetched by one of them while the others wait for it. Its size is kept
/// under `capacity` (plus the blocks being written), evicting the least
/// recently used blocks.
///
/// Blocks are written in the background, so that a cold read costs no more
/// than without a disk cache: a block waiting to be written is read from the
/// queue. The blocks a read fetched are on disk for the next run however
/// the process ends:
/// - dropping the last handle of a file waits (up to 10 s) until its
///   blocks are on disk;
/// - a process that ends by `exit` with files still open (returning from
///   `main`, [`std::process::exit`], C's `exit`, the Python interpreter's
///   exit) writes every cache's queue first, waiting 5 s at most, and lets
///   go of its fetch locks;
/// - otherwise (killed, `_exit`, `os._exit`) a block is lost only if it was
///   fetched in the last second or so: a block waits in the queue about a
///   second at most at the pace the disk was measured to write (a block
///   that would wait longer is written by the fetch that brought it, so a
///   disk slower than the network slows reads to its pace), and a fetch
///   lock of a process that ended is let go of at once by the others on
///   its host (after a few seconds on other hosts).
///
/// Opening a directory already open in this process (by any path to it)
/// gives the same cache: one scan of the directory, one write queue of at
/// most 256 MiB, whatever the number of files that use it. Of the
/// capacities its opens give, the smallest holds (for every handle) while
/// the cache is open; once no handle is left, the next open starts afresh.
///
/// The directory and everything in it are private to the user (0700 and
/// 0600), and [`open`](DiskCache::open) refuses a directory another user
/// could write or replace. Nothing found in it is followed: a link, a FIFO or a file
/// longer than a block file is never read through, written through or
/// waited on. A directory on a network filesystem (NFSv3 or later, Lustre)
/// is shared by every machine that mounts it: exclusive creation and
/// rename must be atomic there, and the machines' clocks agree within a
/// second or two.
///
/// Cloning is cheap and yields a handle to the same cache.
///
/// ```no_run
/// use remfile::{DiskCache, RemoteFile};
///
/// let disk = DiskCache::open("/var/cache/remfile", 20 << 30)?;
/// let file = RemoteFile::builder().disk_cache(disk.clone()).open("https://example.com/data.nwb")?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct DiskCache {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    /// The smallest capacity an open of the directory gave (see [`shared`]).
    capacity: AtomicU64,
    /// The bytes in the directory as this process last knew them.
    used: AtomicU64,
    /// One eviction at a time in this process.
    evicting: Mutex<()>,
    /// Set once a write failed, so that the warning is given once.
    warned: AtomicBool,
    /// Block files waiting to be written, and the thread that writes them.
    writer: Arc<Writer>,
    /// The versions this process forgot (a server proved them gone), and
    /// when: a note of one confirmed before that, still to be written,
    /// is not (see [`DiskCache::remember`]).
    forgotten: Mutex<VecDeque<(Digest, Instant)>>,
    /// Readers waiting for other processes' blocks now (tests order their
    /// threads by it).
    #[cfg(test)]
    waiting: std::sync::atomic::AtomicUsize,
}

impl fmt::Debug for DiskCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiskCache")
            .field("dir", &self.inner.dir)
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl DiskCache {
    /// Whether both handles are of one cache (one directory's queue,
    /// writer and count of bytes).
    #[cfg(test)]
    pub(crate) fn is_the_same_cache(&self, other: &DiskCache) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// How many readers wait for other processes' blocks now.
    #[cfg(test)]
    pub(crate) fn waiting_on_disk(&self) -> usize {
        self.inner.waiting.load(Relaxed)
    }

    /// Opens (creating it, private to the user, if need be) the cache in
    /// `dir`, which holds at most `capacity` bytes of blocks. If this
    /// process has it open already, the handle is to that cache, whose
    /// capacity becomes the smaller of the two.
    ///
    /// # Errors
    ///
    /// The directory cannot be created or read, or another user could write
    /// it or its parts (owned by someone else, group or world writable, a
    /// part replaced by a link, a link to it another user made) or replace
    /// it: [`io::ErrorKind::PermissionDenied`], with a message that says
    /// which. Such a directory would let them plant blocks that a read
    /// serves, read the blocks, or put a link in its place through which
    /// eviction deletes the user's files. The rule for the directories
    /// above it (as the path resolves), as ssh's `StrictModes` has it for a
    /// home directory: each belongs to the user or to root, and none can be
    /// written by its group or by others unless it is sticky, as `/tmp` is
    /// (there no one can rename or delete what another made).
    ///
    /// ```no_run
    /// match remfile::DiskCache::open("/tmp/shared-by-everyone", 1 << 30) {
    ///     Ok(disk) => println!("caching in {}", disk.dir().display()),
    ///     Err(e) => eprintln!("no disk cache: {e}"),
    /// }
    /// ```
    pub fn open(dir: impl AsRef<Path>, capacity: u64) -> io::Result<DiskCache> {
        private::make_top_dir(dir.as_ref())?;
        // The path it resolves to now: a link in it changed later changes
        // nothing.
        let dir = fs::canonicalize(dir.as_ref())?;
        for part in ["blocks", "tmp", "files"] {
            private::make_dir(&dir.join(part))?;
        }
        let inner = shared::open(dir, capacity, |dir| {
            remove_first_layout(&dir);
            let used = block_files(&dir).iter().map(|b| b.len).sum();
            Inner {
                dir,
                capacity: AtomicU64::new(capacity),
                used: AtomicU64::new(used),
                evicting: Mutex::new(()),
                warned: AtomicBool::new(false),
                writer: Arc::default(),
                forgotten: Mutex::default(),
                #[cfg(test)]
                waiting: std::sync::atomic::AtomicUsize::new(0),
            }
        });
        at_exit::register();
        Ok(DiskCache { inner })
    }

    /// Waits until the blocks queued so far (by any file of this cache) are
    /// written, for at most `timeout`; returns whether they are. Dropping
    /// the last handle of a file waits for its blocks already; this is for
    /// a program that must know, before it ends or measures.
    ///
    /// ```no_run
    /// # let disk = remfile::DiskCache::open("/tmp/cache", 1 << 30)?;
    /// assert!(disk.flush(std::time::Duration::from_secs(10)));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn flush(&self, timeout: Duration) -> bool {
        self.inner
            .writer
            .flush(crate::wait::deadline::after(timeout))
    }

    /// The directory, as its path resolved when it was opened.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The most bytes of blocks it holds: the smallest capacity any open
    /// of its directory in this process gave.
    pub fn capacity(&self) -> u64 {
        self.inner.capacity.load(Relaxed)
    }

    /// The bytes of blocks in the directory now (a scan of it).
    pub fn size_on_disk(&self) -> u64 {
        block_files(&self.inner.dir).iter().map(|b| b.len).sum()
    }

    /// The blocks of one version of one file, by its [`version`] digest,
    /// in blocks of `block_size` bytes.
    pub(crate) fn file(&self, version: Digest, block_size: u64) -> DiskFile {
        let dir = self.version_dir(&version);
        DiskFile {
            cache: self.clone(),
            identity: version,
            block_size,
            dir,
            name: None,
        }
    }

    /// The directory of the blocks of the file version `version`.
    fn version_dir(&self, version: &Digest) -> PathBuf {
        self.inner.dir.join("blocks").join(digest::hex(version))
    }

    /// Releases `locks` once the blocks queued so far are on disk, so that
    /// a process waiting for one finds it there.
    pub(crate) fn release_after_writes(&self, locks: Vec<FetchLock>) {
        self.release_after_writes_then(locks, None);
    }

    /// As [`release_after_writes`](Self::release_after_writes), taking the
    /// step `then` (on the writing thread) before the locks go.
    fn release_after_writes_then(&self, locks: Vec<FetchLock>, then: Option<writer::Then>) {
        let cache = self.clone();
        self.inner
            .writer
            .release_after_writes(locks, then, || Box::new(cache));
    }

    fn files_dir(&self) -> PathBuf {
        self.inner.dir.join("files")
    }

    /// Makes `dir`, a directory inside the cache, and those between, each
    /// private and none a link (a directory deleted underneath is made
    /// again).
    fn make_inside(&self, dir: &Path) -> io::Result<()> {
        let top = &self.inner.dir;
        private::make_top_dir(top)?;
        let inside = dir.strip_prefix(top).map_err(io::Error::other)?;
        let mut at = top.clone();
        for part in inside.components() {
            at.push(part);
            private::make_dir(&at)?;
        }
        Ok(())
    }

    /// Writes `bytes` to a new temporary file, then renames it to `path`
    /// (in a directory of the cache): a reader sees the whole file or none
    /// of it, and whatever was at `path` (a link included) is replaced,
    /// never written through.
    fn store_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        use std::io::Write;
        let tmp = self.inner.dir.join("tmp");
        let (temporary, mut file) = match private::create_temporary(&tmp) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.make_inside(&tmp)?;
                private::create_temporary(&tmp)?
            }
            other => other?,
        };
        let renamed = file.write_all(bytes).and_then(|()| {
            drop(file);
            let parent = path.parent().unwrap_or(&self.inner.dir);
            match fs::symlink_metadata(parent) {
                Ok(meta) if meta.is_dir() => {}
                _ => {
                    // Gone (deleted underneath), or replaced: made again.
                    let _ = fs::remove_file(parent);
                    self.make_inside(parent)?;
                }
            }
            fs::rename(&temporary, path)
        });
        if renamed.is_err() {
            let _ = fs::remove_file(&temporary);
        }
        renamed
    }

    fn warn_once(&self, what: &str, error: &io::Error) {
        if !self.inner.warned.swap(true, Relaxed) {
            tracing::warn!(dir = %self.inner.dir.display(), %error, "disk cache: {what}; reads go on from the network");
        }
    }

    /// Deletes the least recently used blocks until the directory holds at
    /// most [`EVICT_TO`] of the capacity. Temporary files a dead writer
    /// left behind go too.
    fn evict(&self) {
        let Some(_one) = self.inner.evicting.try_lock() else {
            return;
        };
        let mut blocks = block_files(&self.inner.dir);
        let mut total: u64 = blocks.iter().map(|b| b.len).sum();
        let goal = (self.capacity() as f64 * EVICT_TO) as u64;
        blocks.sort_by_key(|b| b.used);
        for b in blocks {
            if total <= goal {
                break;
            }
            if fs::remove_file(&b.path).is_ok() {
                total -= b.len;
            }
        }
        self.inner.used.store(total, Relaxed);
        remove_stale_temporaries(&self.inner.dir.join("tmp"));
    }
}

/// The blocks of one version of one remote file on disk.
pub(crate) struct DiskFile {
    cache: DiskCache,
    /// The version's digest (see [`version`]), which every block file of it
    /// carries.
    identity: Digest,
    block_size: u64,
    dir: PathBuf,
    /// The name the file goes by (its record's), once known: what
    /// [`forget_version`](DiskFile::forget_version) forgets.
    name: Option<record::Name>,
}

impl DiskFile {
    /// This file, known by `name` (see [`record::name`]).
    pub(crate) fn named(self, name: record::Name) -> DiskFile {
        DiskFile {
            name: Some(name),
            ..self
        }
    }

    /// Forgets this version of the file — its record, if it still names
    /// it, and its blocks — because the server proved it is no longer the
    /// file's (a `412` to `If-Match`, another validator or size): the next
    /// open then asks the server and reads the new version.
    pub(crate) fn forget_version(&self) {
        if let Some(name) = &self.name {
            self.cache.forget(name, &self.identity);
        }
    }

    /// The most bytes of blocks its cache holds, for all files together.
    pub(crate) fn capacity(&self) -> u64 {
        self.cache.capacity()
    }

    fn owner(&self, index: u64) -> Owner<'_> {
        Owner {
            identity: &self.identity,
            block_size: self.block_size,
            index,
        }
    }

    fn path(&self, index: u64) -> PathBuf {
        self.dir.join(format!("{}-{index}", self.block_size))
    }

    /// What is at the file's directory, looked at without following it.
    fn dir_state(&self) -> DirState {
        match fs::symlink_metadata(&self.dir) {
            Ok(meta) if meta.is_dir() => DirState::Real,
            Ok(_) => DirState::Replaced,
            Err(_) => DirState::Missing,
        }
    }

    /// The longest a block file of this file can be.
    fn max_file_len(&self) -> u64 {
        format::encoded_len(self.block_size)
    }

    /// Whether block `index` looks to be on disk (a block file no longer than
    /// a block's, or one waiting to be written), without reading it: for a
    /// prefetch, which need not bring it into memory. A damaged one is found,
    /// and fetched again, when it is read.
    pub(crate) fn holds(&self, index: u64) -> bool {
        if self.dir_state() == DirState::Replaced {
            return false;
        }
        let path = self.path(index);
        if self.cache.inner.writer.waiting(&path).is_some() {
            return true;
        }
        fs::symlink_metadata(&path)
            .is_ok_and(|m| m.is_file() && m.len() > 0 && m.len() <= self.max_file_len())
    }

    /// Block `index`, `len` bytes long, if it is on disk and intact. A block
    /// file that is not (a link, a FIFO, too long included) is deleted.
    pub(crate) fn read(&self, index: u64, len: u64) -> Option<Vec<u8>> {
        let max = self.max_file_len();
        self.read_file(&self.path(index), self.owner(index), max, |payload| {
            (payload.len() as u64 == len).then(|| payload.to_vec())
        })
    }

    /// What `accept` makes of the payload of the file at `path` (a block's
    /// or the pieces'), if it belongs to `owner`, is at most `max` bytes
    /// long and intact, and `accept` takes it. A file that is not (a link, a
    /// FIFO, too long, damaged, refused) is deleted; nothing is read or
    /// deleted through a directory replaced by a link. A file still in the
    /// write queue is read from there.
    fn read_file<T>(
        &self,
        path: &Path,
        owner: Owner<'_>,
        max: u64,
        accept: impl FnOnce(&[u8]) -> Option<T>,
    ) -> Option<T> {
        if self.dir_state() == DirState::Replaced {
            return None;
        }
        if let Some(queued) = self.cache.inner.writer.waiting(path) {
            return format::decode(owner, &queued).ok().and_then(accept);
        }
        let bytes = match private::read_regular(path, max) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "disk cache: not a block file; removed");
                let _ = fs::remove_file(path);
                return None;
            }
        };
        match format::decode(owner, &bytes).map(accept) {
            Ok(Some(taken)) => {
                // Reading is using: the file is the most recently used now.
                let _ = private::touch(path, max);
                Some(taken)
            }
            outcome => {
                let outcome = outcome.map(|_| "refused");
                tracing::warn!(path = %path.display(), ?outcome, "disk cache: a damaged block; fetching it again");
                let _ = fs::remove_file(path);
                None
            }
        }
    }

    /// Keeps block `index` on disk. Failures (a read-only or full disk, a
    /// directory deleted underneath) are warned of, never returned.
    /// It is written in the background (see [`writer`]); until then a read
    /// finds it in the queue. If the queue is full it is written now.
    pub(crate) fn write(&self, index: u64, payload: &[u8]) {
        let bytes = format::encode(self.owner(index), payload);
        self.cache
            .inner
            .writer
            .write(self.path(index), bytes, || Box::new(self.cache.clone()));
    }

    /// See [`DiskCache::release_after_writes`].
    pub(crate) fn release_after_writes(&self, locks: Vec<FetchLock>) {
        self.cache.release_after_writes(locks);
    }

    fn pieces_path(&self) -> PathBuf {
        self.dir.join("pieces")
    }

    /// Keeps the file's `pieces` (by first byte, in order) on disk, in
    /// place of those kept before, as [`write`](Self::write) keeps a block:
    /// exact ranges fetched for the HDF5 driver, which no block holds, so
    /// that the next run finds them too. As many as the limits of
    /// [`format::encode_pieces`] allow, within a quarter of the disk
    /// cache's capacity (the pieces are a side store, never most of it).
    pub(crate) fn write_pieces<'p>(&self, pieces: impl IntoIterator<Item = (u64, &'p [u8])>) {
        let payload = format::encode_pieces(pieces, self.capacity() / 4);
        let bytes = format::encode(format::pieces_owner(&self.identity), &payload);
        self.cache
            .inner
            .writer
            .write(self.pieces_path(), bytes, || Box::new(self.cache.clone()));
    }

    /// The pieces kept on disk for this file, `len` bytes long, if they are
    /// there and intact (a pieces file that is not is deleted).
    pub(crate) fn read_pieces(&self, len: u64) -> Vec<(u64, Vec<u8>)> {
        let owner = format::pieces_owner(&self.identity);
        let max = format::max_pieces_file_len();
        self.read_file(&self.pieces_path(), owner, max, |payload| {
            let pieces = format::decode_pieces(payload, len).ok()?;
            Some(pieces.into_iter().map(|(at, b)| (at, b.to_vec())).collect())
        })
        .unwrap_or_default()
    }

    /// Waits until the blocks queued (by any file of this cache) are on
    /// disk, or `deadline`.
    pub(crate) fn flush(&self, deadline: Instant) -> bool {
        self.cache.inner.writer.flush(deadline)
    }
}

impl WriteFile for DiskCache {
    fn write_file(&self, path: &Path, bytes: &[u8]) {
        // A file written again (the pieces file, kept anew as they grow)
        // replaces its old bytes: only the difference is new.
        let replaced = fs::symlink_metadata(path)
            .ok()
            .filter(|m| m.is_file())
            .map_or(0, |m| m.len());
        if let Err(e) = self.store_file(path, bytes) {
            self.warn_once("cannot write a block", &e);
            return;
        }
        let inner = &self.inner;
        let added = bytes.len() as u64;
        let new_used = |used: u64| (used + added).saturating_sub(replaced);
        let before = inner
            .used
            .fetch_update(Relaxed, Relaxed, |used| Some(new_used(used)))
            .unwrap_or_else(|used| used);
        let used = new_used(before);
        if used > self.capacity() {
            self.evict();
        }
    }
}

/// How many of the blocks another process is fetching a waiter looks for
/// at a time (one look is a file opened, or not found).
const PROBES_PER_LOOK: usize = 16;

/// Until when a read whose deadline is `deadline` waits for other
/// processes' fetches, from now: three quarters of the way, so that it can
/// still fetch what they did not bring. Nothing shorter: a holder that is
/// gone is seen at once (its lock is let go, or goes stale), and one that
/// lives is bounded by its own deadline; a long fetch in large parts lands
/// no block for a long while (eight processes of a debug build sharing a
/// 64 MiB read on two busy cores fetched it 2.5 times over with a bound of
/// 20 s between blocks).
fn wait_bound(deadline: Instant) -> Instant {
    let now = Instant::now();
    now + deadline.saturating_duration_since(now) * 3 / 4
}

/// What is at a file's directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DirState {
    Real,
    /// A link, or anything else that is not a directory.
    Replaced,
    Missing,
}

/// The blocks of a fetch, sorted out among the processes using the
/// directory.
#[derive(Default)]
pub(crate) struct Claimed {
    /// The locks held on `mine` (none where the directory cannot hold one:
    /// no process can then wait for another).
    pub locks: Vec<FetchLock>,
    /// The blocks this process fetches, in the order asked.
    pub mine: Vec<u64>,
    /// The blocks another live process is fetching, and will write.
    pub theirs: Vec<u64>,
}

/// Who fetches one block.
enum Fetcher {
    Me(Option<FetchLock>),
    Other,
}

impl DiskFile {
    fn lock_path(&self, index: u64) -> PathBuf {
        self.dir.join(format!("{}-{index}.lock", self.block_size))
    }

    /// Claims `blocks` for this process to fetch, but those another process
    /// is fetching (see [`lock`] for when a lock is left over and taken):
    /// one lock for all, its files linked to the first's.
    pub(crate) fn claim_fetches(&self, blocks: &[u64]) -> Claimed {
        if self.dir_state() == DirState::Replaced {
            // A link (or a file) where the file's directory should be: the
            // locks would be made wherever it points. Made again here.
            let _ = fs::remove_file(&self.dir);
        }
        let mut claimed = Claimed::default();
        for &index in blocks {
            let path = self.lock_path(index);
            let fetcher = match claimed.locks.last_mut().map(|l| l.extend(&path)) {
                Some(Ok(true)) => Fetcher::Me(None),
                Some(Ok(false)) => Fetcher::Other,
                // The first, or a filesystem that cannot link.
                Some(Err(_)) | None => self.claim_one(&path),
            };
            match fetcher {
                Fetcher::Me(lock) => {
                    claimed.mine.push(index);
                    claimed.locks.extend(lock);
                }
                Fetcher::Other => claimed.theirs.push(index),
            }
        }
        claimed
    }

    /// A lock of its own at `path`.
    fn claim_one(&self, path: &Path) -> Fetcher {
        let taken = match FetchLock::take(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => self
                .cache
                .make_inside(&self.dir)
                .and_then(|()| FetchLock::take(path)),
            other => other,
        };
        match taken {
            Ok(Some(lock)) => Fetcher::Me(Some(lock)),
            Ok(None) => Fetcher::Other,
            Err(_) => Fetcher::Me(None),
        }
    }

    /// Waits for other processes to write `blocks` (index and length each),
    /// handing each to `take` as it lands on disk, in whatever order they
    /// come. A block is given up once no one holds its lock without having
    /// written it, and all that are left at the [`wait_bound`] of `deadline`
    /// (the rest of the time is this reader's own, to fetch what did not
    /// come). Returns whether it gave up at that bound (or at a stop), with
    /// blocks still held by others: those are this reader's to fetch now,
    /// while a block let go of unwritten is to be claimed again.
    pub(crate) fn wait_for_all(
        &self,
        blocks: &[(u64, u64)],
        stop: &Stop,
        mut take: impl FnMut(u64, Vec<u8>),
    ) -> bool {
        let deadline = stop.deadline();
        #[cfg(test)]
        let _waiting = crate::sync::Waiting::new(&self.cache.inner.waiting);
        let mut pending: VecDeque<(u64, u64)> = blocks.iter().copied().collect();
        let until = wait_bound(deadline);
        let mut pause = Duration::from_millis(1);
        let mut out_of_time = false;
        while !pending.is_empty() {
            // A few looked at in turn: an arrival anywhere is taken at once.
            let mut arrived = false;
            for _ in 0..PROBES_PER_LOOK.min(pending.len()) {
                let (index, len) = pending.pop_front().expect("not empty");
                match self.read(index, len) {
                    Some(bytes) => {
                        take(index, bytes);
                        arrived = true;
                    }
                    None => pending.push_back((index, len)),
                }
            }
            // One lock asked about each look, a different one each time: a
            // block whose fetcher gave up is fetched here soon, whatever
            // the others do.
            pending.rotate_left(usize::from(pending.len() > 1));
            if let Some(&(index, len)) = pending.front() {
                if !lock::is_held(&self.lock_path(index)) {
                    // Once more: it may have come just before the lock went.
                    pending.pop_front();
                    match self.read(index, len) {
                        Some(bytes) => {
                            take(index, bytes);
                            arrived = true;
                        }
                        // Given up: the next one is asked about at once.
                        None => continue,
                    }
                }
            }
            if arrived {
                pause = Duration::from_millis(1);
                continue;
            }
            // A stopped read fetches what is left, which fails at once.
            if Instant::now() >= until || stop.should_stop() {
                out_of_time = true;
                break;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
        // What landed since it was last looked at is not fetched again.
        for (index, len) in pending {
            if let Some(bytes) = self.read(index, len) {
                take(index, bytes);
            }
        }
        out_of_time
    }
}

/// A block file found in the directory.
struct BlockFile {
    path: PathBuf,
    len: u64,
    used: SystemTime,
}

/// Every block file under `dir`.
fn block_files(dir: &Path) -> Vec<BlockFile> {
    let mut out = Vec::new();
    let Ok(files) = fs::read_dir(dir.join("blocks")) else {
        return out;
    };
    // File types as the entries are, never what a link points to: a link
    // planted in place of a directory is neither scanned nor evicted into.
    for file_dir in files.flatten() {
        if !file_dir.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(blocks) = fs::read_dir(file_dir.path()) else {
            continue;
        };
        for block in blocks.flatten() {
            if block.path().extension().is_some_and(|e| e == "lock")
                || !block.file_type().is_ok_and(|t| t.is_file())
            {
                continue;
            }
            if let Ok(meta) = fs::symlink_metadata(block.path()) {
                out.push(BlockFile {
                    path: block.path(),
                    len: meta.len(),
                    used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                });
            }
        }
    }
    out
}

/// Deletes what crate versions before layout 2 left in `dir`: block
/// directories and records named by a 64-bit hash (16 hexadecimal digits),
/// whose files hold URLs (their queries' tokens included), cache keys and
/// validators in clear. Their blocks would never be read again (names and
/// owners are SHA-256 digests now, and their signature is another layout's);
/// deleted at the first open of a newer version rather than when evicted,
/// they take those tokens off the disk at once. Only real directories and
/// regular files go: a link is never followed, nor removed.
fn remove_first_layout(dir: &Path) {
    let first_layout = |name: &std::ffi::OsStr| {
        let name = name.to_string_lossy();
        let hash = name.strip_suffix(".lock").unwrap_or(&name);
        hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit())
    };
    for (part, is_dir) in [("blocks", true), ("files", false)] {
        let Ok(entries) = fs::read_dir(dir.join(part)) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(kind) = e.file_type() else { continue };
            if !first_layout(&e.file_name()) {
                continue;
            }
            if is_dir && kind.is_dir() && !e.file_name().to_string_lossy().ends_with(".lock") {
                let _ = fs::remove_dir_all(e.path());
            } else if !is_dir && kind.is_file() {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for e in entries.flatten() {
        let old = fs::symlink_metadata(e.path())
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).unwrap_or_default() > STALE_TEMPORARY);
        if old {
            let _ = fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits until `f`'s blocks are on disk (they are written in the
    /// background).
    fn written(f: &DiskFile) {
        assert!(f.flush(Instant::now() + Duration::from_secs(10)));
    }

    /// A version's digest, for a test.
    fn id(text: &str) -> Digest {
        digest::of("test", &[text.as_bytes()])
    }

    /// A cache directory not made yet, in a directory of the test's own
    /// (removed with the first).
    fn temp_dir(name: &str) -> (tempfile::TempDir, PathBuf) {
        let own = tempfile::tempdir().unwrap();
        let dir = own.path().join(name);
        (own, dir)
    }

    #[test]
    fn pieces_survive_a_new_handle_and_damage_or_links_are_never_taken() {
        let (_dir_own, dir) = temp_dir("pieces");
        let disk = DiskCache::open(&dir, 1 << 20).unwrap();
        let f = disk.file(id("id"), 4096);
        let (a, b) = (vec![1u8; 100], vec![2u8; 50]);
        f.write_pieces([(10, &a[..]), (5000, &b[..])]);
        assert_eq!(f.read_pieces(6000).len(), 2, "from the queue");
        written(&f);
        let again = DiskCache::open(&dir, 1 << 20).unwrap().file(id("id"), 4096);
        assert_eq!(
            again.read_pieces(6000),
            [(10, a.clone()), (5000, b.clone())]
        );
        // Another version of the file (shorter), or another file.
        assert!(again.read_pieces(5020).is_empty());
        f.write_pieces([(10, &a[..])]);
        written(&f);
        assert!(disk.file(id("other"), 4096).read_pieces(6000).is_empty());
        // A flipped byte: refused and removed.
        let path = f.pieces_path();
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert!(f.read_pieces(6000).is_empty());
        assert!(!path.exists());
        // A link planted in its place is not read through.
        #[cfg(unix)]
        {
            let target = dir.join("elsewhere");
            fs::write(
                &target,
                format::encode(format::pieces_owner(&id("id")), &[]),
            )
            .unwrap();
            std::os::unix::fs::symlink(&target, &path).unwrap();
            assert!(f.read_pieces(6000).is_empty());
            assert!(target.exists(), "what the link pointed to is left alone");
        }
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn pieces_kept_anew_count_once_and_keep_to_a_quarter_of_the_disk() {
        let (_dir_own, dir) = temp_dir("pieces-count");
        let disk = DiskCache::open(&dir, 1 << 20).unwrap();
        let f = disk.file(id("id"), 4096);
        let piece = vec![3u8; 100_000];
        for _ in 0..20 {
            f.write_pieces([(0, &piece[..])]);
            written(&f);
        }
        let used = disk.inner.used.load(Relaxed);
        assert_eq!(used, disk.size_on_disk(), "one pieces file, counted once");
        assert!(used < 200_000, "{used}");
        // Pieces beyond a quarter of the capacity stay out.
        f.write_pieces([
            (0, &piece[..]),
            (200_000, &piece[..]),
            (500_000, &piece[..]),
        ]);
        written(&f);
        assert_eq!(f.read_pieces(1 << 20).len(), 2);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn blocks_survive_a_new_handle_and_damage_is_refetched() {
        let (_dir_own, dir) = temp_dir("survive");
        let disk = DiskCache::open(&dir, 1 << 20).unwrap();
        let f = disk.file(id("id"), 4096);
        f.write(3, &[7; 4096]);
        written(&f);
        let again = DiskCache::open(&dir, 1 << 20).unwrap().file(id("id"), 4096);
        assert_eq!(again.read(3, 4096), Some(vec![7; 4096]));
        assert_eq!(again.read(3, 4095), None, "another length");
        // That read deleted it as damaged.
        assert_eq!(again.read(3, 4096), None);
        f.write(4, &[1; 4096]);
        written(&f);
        let path = f.path(4);
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        fs::write(&path, bytes).unwrap();
        assert_eq!(f.read(4, 4096), None);
        assert!(!path.exists(), "a damaged block is deleted");
        assert_eq!(disk.file(id("other"), 4096).read(3, 4096), None);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_directory_stays_under_its_capacity() {
        let (_dir_own, dir) = temp_dir("capacity");
        let disk = DiskCache::open(&dir, 100_000).unwrap();
        let f = disk.file(id("id"), 10_000);
        for i in 0..50 {
            f.write(i, &[i as u8; 10_000]);
            written(&f);
            assert!(
                disk.size_on_disk() <= 100_000 + 10_100,
                "{}",
                disk.size_on_disk()
            );
        }
        // The most recent blocks are the ones kept.
        assert_eq!(f.read(49, 10_000), Some(vec![49; 10_000]));
        assert_eq!(f.read(0, 10_000), None);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn two_handles_on_one_directory_write_side_by_side() {
        let (_dir_own, dir) = temp_dir("handles");
        let writers: Vec<_> = (0..2u8)
            .map(|w| {
                let disk = DiskCache::open(&dir, 64 << 20).unwrap();
                std::thread::spawn(move || {
                    let f = disk.file(id(&format!("id{w}")), 4096);
                    for i in 0..200 {
                        f.write(i, &[w; 4096]);
                    }
                    written(&f);
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let disk = DiskCache::open(&dir, 64 << 20).unwrap();
        for w in 0..2u8 {
            let f = disk.file(id(&format!("id{w}")), 4096);
            for i in 0..200 {
                assert_eq!(f.read(i, 4096), Some(vec![w; 4096]), "{w} {i}");
            }
        }
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_directory_is_one_cache_in_a_process_whatever_its_name() {
        let (_dir_own, dir) = temp_dir("shared");
        let first = DiskCache::open(&dir, 3 << 20).unwrap();
        let f = first.file(id("id"), 100);
        f.write(0, &[1; 100]);
        let again = DiskCache::open(dir.join("blocks/.."), 5 << 20).unwrap();
        assert!(first.is_the_same_cache(&again), "one cache");
        assert!(
            Arc::ptr_eq(&first.inner.writer, &again.inner.writer),
            "one queue"
        );
        // The smaller capacity holds, for every handle.
        assert_eq!(again.capacity(), 3 << 20);
        let smaller = DiskCache::open(&dir, 2 << 20).unwrap();
        assert_eq!((first.capacity(), smaller.capacity()), (2 << 20, 2 << 20));
        assert!(again.flush(Duration::from_secs(10)));
        // Once no handle is left (its writer gone too), a new one.
        let weak = Arc::downgrade(&first.inner);
        drop((f, first, again, smaller));
        remfile_testkit::time::wait_for(Duration::from_secs(10), || weak.strong_count() == 0);
        let fresh = DiskCache::open(&dir, 4 << 20).unwrap();
        assert_eq!(fresh.capacity(), 4 << 20);
        assert_eq!(fresh.file(id("id"), 100).read(0, 100), Some(vec![1; 100]));
        let _ = fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn what_the_first_layout_left_goes_at_open_and_links_stay() {
        let (_dir_own, dir) = temp_dir("first-layout");
        let old_blocks = dir.join("blocks/0123456789abcdef");
        fs::create_dir_all(&old_blocks).unwrap();
        fs::write(
            old_blocks.join("4096-0"),
            b"RMFBLK1\0url https://h/f?token=T",
        )
        .unwrap();
        fs::create_dir_all(dir.join("files")).unwrap();
        let old_record = dir.join("files/fedcba9876543210");
        fs::write(&old_record, b"url https://h/f?token=T\netag \"e\"\nsize 9").unwrap();
        fs::write(old_record.with_extension("lock"), b"1").unwrap();
        let keep = dir.join("files/notes");
        fs::write(&keep, b"the user's").unwrap();
        let (_outside_own, outside) = temp_dir("first-layout-outside");
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("4096-0"), b"someone's").unwrap();
        let link = dir.join("blocks/ffffffffffffffff");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        let disk = DiskCache::open(&dir, 1 << 20).unwrap();
        assert!(!old_blocks.exists() && !old_record.exists());
        assert!(!old_record.with_extension("lock").exists());
        assert!(keep.exists(), "not a name of the first layout");
        assert_eq!(disk.size_on_disk(), 0);
        assert!(fs::symlink_metadata(&link).is_ok(), "a link is left alone");
        assert!(outside.join("4096-0").exists(), "and not followed");
        let _ = fs::remove_dir_all(&outside);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_deleted_directory_is_made_again() {
        let (_dir_own, dir) = temp_dir("deleted");
        let disk = DiskCache::open(&dir, 1 << 20).unwrap();
        let f = disk.file(id("id"), 100);
        fs::remove_dir_all(&dir).unwrap();
        f.write(0, &[5; 100]);
        written(&f);
        assert_eq!(f.read(0, 100), Some(vec![5; 100]));
        let _ = fs::remove_dir_all(&dir);
    }
}
