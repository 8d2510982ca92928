//! Blocks kept on disk, behind the in-memory cache: shared by the files of a
//! process and by processes using the same directory, bounded in bytes.
//!
//! Each block is one file, written whole to a temporary name and renamed
//! into place, so a reader sees a block entirely or not at all, even when the
//! writer is killed midway. Each carries its owner (the remote file's
//! identity, the block size and index) and a CRC-32C of its bytes
//! ([`format`]), checked on every read: a block that does not match is
//! deleted and fetched again. A directory that cannot be written, a full
//! disk or a directory deleted underneath are never errors for a read: the
//! bytes come from the network, with a `warn` event.

mod format;

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use self::format::Owner;

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
/// [`Builder::disk_cache`](crate::Builder::disk_cache): a read looks in
/// memory, then on disk, then fetches. A block on disk belongs to one
/// version of one remote file — its URL without the query string (or the
/// builder's [`cache_key`](crate::Builder::cache_key)), its validator
/// (a strong ETag, or else `Last-Modified`) and its size — so presigned URLs
/// whose signatures change still find their blocks, and a changed file never
/// receives its old bytes. A file with no validator is not cached on disk.
///
/// Several processes may use one directory at once. Its size is kept under
/// `capacity` (plus the blocks being written), evicting the least recently
/// used blocks.
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
    capacity: u64,
    /// The bytes in the directory as this process last knew them.
    used: AtomicU64,
    /// One eviction at a time in this process.
    evicting: Mutex<()>,
    /// Set once a write failed, so that the warning is given once.
    warned: AtomicBool,
}

impl fmt::Debug for DiskCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiskCache")
            .field("dir", &self.inner.dir)
            .field("capacity", &self.inner.capacity)
            .finish()
    }
}

impl DiskCache {
    /// Opens (creating it if need be) the cache in `dir`, which holds at
    /// most `capacity` bytes of blocks.
    ///
    /// # Errors
    ///
    /// The directory cannot be created or read.
    pub fn open(dir: impl AsRef<Path>, capacity: u64) -> io::Result<DiskCache> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(dir.join("blocks"))?;
        fs::create_dir_all(dir.join("tmp"))?;
        let used = block_files(&dir).iter().map(|b| b.len).sum();
        Ok(DiskCache {
            inner: Arc::new(Inner {
                dir,
                capacity,
                used: AtomicU64::new(used),
                evicting: Mutex::new(()),
                warned: AtomicBool::new(false),
            }),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The most bytes of blocks it holds.
    pub fn capacity(&self) -> u64 {
        self.inner.capacity
    }

    /// The bytes of blocks in the directory now (a scan of it).
    pub fn size_on_disk(&self) -> u64 {
        block_files(&self.inner.dir).iter().map(|b| b.len).sum()
    }

    /// The blocks of one version of one file, by its identity text, in
    /// blocks of `block_size` bytes.
    pub(crate) fn file(&self, identity: String, block_size: u64) -> DiskFile {
        let dir = self.version_dir(&identity);
        DiskFile {
            cache: self.clone(),
            identity,
            block_size,
            dir,
        }
    }

    /// The directory of the blocks of the file version `identity`.
    fn version_dir(&self, identity: &str) -> PathBuf {
        self.inner
            .dir
            .join("blocks")
            .join(format!("{:016x}", fnv1a(identity.as_bytes())))
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
        let goal = (self.inner.capacity as f64 * EVICT_TO) as u64;
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
    /// URL (or cache key), validator and size, one per line.
    identity: String,
    block_size: u64,
    dir: PathBuf,
}

impl DiskFile {
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

    /// Block `index`, `len` bytes long, if it is on disk and intact. A block
    /// file that is not is deleted.
    pub(crate) fn read(&self, index: u64, len: u64) -> Option<Vec<u8>> {
        let path = self.path(index);
        let bytes = fs::read(&path).ok()?;
        match format::decode(self.owner(index), &bytes) {
            Ok(payload) if payload.len() as u64 == len => {
                // Reading is using: the block is the most recently used now.
                if let Ok(f) = fs::File::options().write(true).open(&path) {
                    let _ = f.set_modified(SystemTime::now());
                }
                Some(payload.to_vec())
            }
            outcome => {
                tracing::warn!(path = %path.display(), ?outcome, "disk cache: a damaged block; fetching it again");
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Keeps block `index` on disk. Failures (a read-only or full disk, a
    /// directory deleted underneath) are warned of, never returned.
    pub(crate) fn write(&self, index: u64, payload: &[u8]) {
        let bytes = format::encode(self.owner(index), payload);
        let inner = &self.cache.inner;
        let temporary = temporary_path(&inner.dir);
        let written = write_then_rename(&temporary, &self.path(index), &bytes, &self.dir);
        if let Err(e) = written {
            let _ = fs::remove_file(&temporary);
            self.cache.warn_once("cannot write a block", &e);
            return;
        }
        let used = inner.used.fetch_add(bytes.len() as u64, Relaxed) + bytes.len() as u64;
        if used > inner.capacity {
            self.cache.evict();
        }
    }
}

/// A claim on fetching one block for every process using the directory: a
/// lock file beside the block, deleted when dropped (the block written or
/// given up).
pub(crate) struct FetchLock {
    path: PathBuf,
}

impl Drop for FetchLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Who fetches a block.
pub(crate) enum Fetcher {
    /// This process, holding the lock (or none, if the directory cannot
    /// hold one: no process can then wait for another).
    Me(Option<FetchLock>),
    /// Another live process, which will write it.
    Other,
}

impl DiskFile {
    fn lock_path(&self, index: u64) -> PathBuf {
        self.dir.join(format!("{}-{index}.lock", self.block_size))
    }

    /// Claims block `index` for this process to fetch, unless another process
    /// is fetching it. A lock whose process died, or older than `stale`, is
    /// taken over: a dead process never makes others wait.
    pub(crate) fn claim_fetch(&self, index: u64, stale: Duration) -> Fetcher {
        let path = self.lock_path(index);
        for _ in 0..2 {
            let created = fs::File::options().write(true).create_new(true).open(&path);
            match created {
                Ok(mut f) => {
                    use std::io::Write;
                    let _ = writeln!(f, "{}", std::process::id());
                    return Fetcher::Me(Some(FetchLock { path }));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    if !lock_is_stale(&path, stale) {
                        return Fetcher::Other;
                    }
                    let _ = fs::remove_file(&path);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    if fs::create_dir_all(&self.dir).is_err() {
                        return Fetcher::Me(None);
                    }
                }
                Err(_) => return Fetcher::Me(None),
            }
        }
        Fetcher::Me(None)
    }

    /// Waits for another process to write block `index` (`len` bytes): the
    /// block once it is on disk; `None` once no live process holds its lock
    /// without having written it, or at `deadline`.
    pub(crate) fn wait_for(
        &self,
        index: u64,
        len: u64,
        deadline: std::time::Instant,
        stale: Duration,
    ) -> Option<Vec<u8>> {
        let lock = self.lock_path(index);
        let mut pause = Duration::from_millis(1);
        loop {
            if let Some(block) = self.read(index, len) {
                return Some(block);
            }
            let held = lock.exists() && !lock_is_stale(&lock, stale);
            if !held || std::time::Instant::now() >= deadline {
                // Written just before the lock went, perhaps.
                return self.read(index, len);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }
}

/// A lock with no process id in it this long after it was made was left by
/// a process killed between making it and writing its id.
const LOCK_GRACE: Duration = Duration::from_secs(2);

/// Whether the lock at `path` is left over: its process is gone (where the
/// system says which processes live), it never got its process's id, or it
/// is older than `stale`.
fn lock_is_stale(path: &Path, stale: Duration) -> bool {
    let Ok(meta) = fs::metadata(path) else {
        return false;
    };
    let age = meta
        .modified()
        .ok()
        .and_then(|t| t.elapsed().ok())
        .unwrap_or_default();
    let pid = fs::read_to_string(path)
        .ok()
        .and_then(|pid| pid.trim().parse::<u32>().ok());
    let dead = match pid {
        Some(pid) => {
            let proc = Path::new("/proc");
            proc.join("self").exists() && !proc.join(pid.to_string()).exists()
        }
        None => age > LOCK_GRACE,
    };
    age > stale || dead
}

/// A name under `dir/tmp` that no other writer uses: the process's id, and
/// a count shared by every cache handle of the process (two handles on one
/// directory must not write to the same temporary file).
fn temporary_path(dir: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Relaxed);
    dir.join("tmp")
        .join(format!("{}-{n}.tmp", std::process::id()))
}

/// Writes `bytes` to `temporary`, then renames it to `path`: a reader sees
/// the whole block or none of it.
fn write_then_rename(temporary: &Path, path: &Path, bytes: &[u8], dir: &Path) -> io::Result<()> {
    let write = || fs::write(temporary, bytes);
    if let Err(e) = write() {
        if e.kind() != io::ErrorKind::NotFound {
            return Err(e);
        }
        // The directory was deleted underneath: make it again, once.
        fs::create_dir_all(temporary.parent().unwrap_or(dir))?;
        write()?;
    }
    if let Err(e) = fs::rename(temporary, path) {
        if e.kind() != io::ErrorKind::NotFound {
            return Err(e);
        }
        fs::create_dir_all(dir)?;
        fs::rename(temporary, path)?;
    }
    Ok(())
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
    for file_dir in files.flatten() {
        let Ok(blocks) = fs::read_dir(file_dir.path()) else {
            continue;
        };
        for block in blocks.flatten() {
            if block.path().extension().is_some_and(|e| e == "lock") {
                continue;
            }
            if let Ok(meta) = block.metadata() {
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

fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).unwrap_or_default() > STALE_TEMPORARY);
        if old {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// A stable 64-bit hash (FNV-1a) of a file's identity, naming its directory.
/// Collisions cost nothing but misses: every block file carries the whole
/// identity, which a read compares.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The name a file goes by on disk: its URL without query, fragment and
/// credentials, or the builder's key.
pub(crate) fn name(url: &url::Url, key: Option<&str>) -> String {
    match key {
        Some(k) => format!("key {k}"),
        None => {
            let mut bare = url.clone();
            bare.set_query(None);
            bare.set_fragment(None);
            let _ = bare.set_password(None);
            let _ = bare.set_username("");
            format!("url {bare}")
        }
    }
}

/// The identity of a file version on disk: its [`name`], the validator,
/// the size. `None` without a validator to tell versions apart.
pub(crate) fn identity(
    url: &url::Url,
    key: Option<&str>,
    strong_etag: Option<&str>,
    last_modified: Option<&str>,
    size: u64,
) -> Option<String> {
    let validator = strong_etag
        .map(|e| format!("etag {e}"))
        .or_else(|| last_modified.map(|m| format!("modified {m}")))?;
    Some(format!("{}\n{validator}\nsize {size}", name(url, key)))
}

/// The version of a file seen last, as [`DiskCache::recall`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Known {
    /// Its identity text (see [`identity`]).
    pub identity: String,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    pub size: u64,
    /// When it was last confirmed.
    pub seen: SystemTime,
}

impl Known {
    /// Parses an identity text written for `name`.
    fn parse(name: &str, identity: &str, seen: SystemTime) -> Option<Known> {
        let mut lines = identity.lines();
        if lines.next()? != name {
            return None;
        }
        let validator = lines.next()?;
        let size = lines.next()?.strip_prefix("size ")?.parse().ok()?;
        let (etag, last_modified) = match validator.split_once(' ')? {
            ("etag", e) => (Some(e.to_owned()), None),
            ("modified", m) => (None, Some(m.to_owned())),
            _ => return None,
        };
        Some(Known {
            identity: identity.to_owned(),
            etag,
            last_modified,
            size,
            seen,
        })
    }
}

impl DiskCache {
    fn record_path(&self, name: &str) -> PathBuf {
        self.inner
            .dir
            .join("files")
            .join(format!("{:016x}", fnv1a(name.as_bytes())))
    }

    /// Notes that the file called `name` is, as of now, the version
    /// `identity`; forgets the blocks of the version it was before, if
    /// another.
    pub(crate) fn remember(&self, name: &str, identity: &str) {
        if let Some(old) = self.recall(name) {
            if old.identity != identity {
                let _ = fs::remove_dir_all(self.version_dir(&old.identity));
            }
        }
        let inner = &self.inner;
        let temporary = temporary_path(&inner.dir);
        let dir = inner.dir.join("files");
        let path = self.record_path(name);
        if let Err(e) = write_then_rename(&temporary, &path, identity.as_bytes(), &dir) {
            let _ = fs::remove_file(&temporary);
            self.warn_once("cannot note a file's version", &e);
        }
    }

    /// The version of the file called `name` seen last, and when.
    pub(crate) fn recall(&self, name: &str) -> Option<Known> {
        let path = self.record_path(name);
        let text = fs::read_to_string(&path).ok()?;
        let seen = fs::metadata(&path).and_then(|m| m.modified()).ok()?;
        Known::parse(name, &text, seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("remfile-disk-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn identity_leaves_out_the_query_and_needs_a_validator() {
        let u = |s: &str| url::Url::parse(s).unwrap();
        let a = identity(
            &u("https://h/f.nwb?X-Amz-Signature=1"),
            None,
            Some("\"e\""),
            None,
            9,
        );
        let b = identity(
            &u("https://h/f.nwb?X-Amz-Signature=2"),
            None,
            Some("\"e\""),
            None,
            9,
        );
        assert_eq!(a, b);
        assert!(!a.as_ref().unwrap().contains("Signature"));
        assert_ne!(
            a,
            identity(&u("https://h/f.nwb"), None, Some("\"f\""), None, 9)
        );
        assert_ne!(
            a,
            identity(&u("https://h/f.nwb"), None, Some("\"e\""), None, 10)
        );
        assert_eq!(identity(&u("https://h/f.nwb"), None, None, None, 9), None);
        let lm = identity(&u("https://h/f.nwb"), None, None, Some("Mon"), 9).unwrap();
        assert!(lm.contains("modified Mon"));
        let keyed = identity(&u("https://h/a"), Some("asset-1"), Some("\"e\""), None, 9);
        assert_eq!(
            keyed,
            identity(
                &u("https://other/b"),
                Some("asset-1"),
                Some("\"e\""),
                None,
                9
            )
        );
    }

    #[test]
    fn blocks_survive_a_new_handle_and_damage_is_refetched() {
        let dir = temp_dir("survive");
        let disk = DiskCache::open(&dir, 1 << 20).unwrap();
        let f = disk.file("id".into(), 4096);
        f.write(3, &[7; 4096]);
        let again = DiskCache::open(&dir, 1 << 20)
            .unwrap()
            .file("id".into(), 4096);
        assert_eq!(again.read(3, 4096), Some(vec![7; 4096]));
        assert_eq!(again.read(3, 4095), None, "another length");
        // That read deleted it as damaged.
        assert_eq!(again.read(3, 4096), None);
        f.write(4, &[1; 4096]);
        let path = f.path(4);
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        fs::write(&path, bytes).unwrap();
        assert_eq!(f.read(4, 4096), None);
        assert!(!path.exists(), "a damaged block is deleted");
        assert_eq!(disk.file("other".into(), 4096).read(3, 4096), None);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_directory_stays_under_its_capacity() {
        let dir = temp_dir("capacity");
        let disk = DiskCache::open(&dir, 100_000).unwrap();
        let f = disk.file("id".into(), 10_000);
        for i in 0..50 {
            f.write(i, &[i as u8; 10_000]);
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
        let dir = temp_dir("handles");
        let writers: Vec<_> = (0..2u8)
            .map(|w| {
                let disk = DiskCache::open(&dir, 64 << 20).unwrap();
                std::thread::spawn(move || {
                    let f = disk.file(format!("id{w}"), 4096);
                    for i in 0..200 {
                        f.write(i, &[w; 4096]);
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let disk = DiskCache::open(&dir, 64 << 20).unwrap();
        for w in 0..2u8 {
            let f = disk.file(format!("id{w}"), 4096);
            for i in 0..200 {
                assert_eq!(f.read(i, 4096), Some(vec![w; 4096]), "{w} {i}");
            }
        }
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_deleted_directory_is_made_again() {
        let dir = temp_dir("deleted");
        let disk = DiskCache::open(&dir, 1 << 20).unwrap();
        let f = disk.file("id".into(), 100);
        fs::remove_dir_all(&dir).unwrap();
        f.write(0, &[5; 100]);
        assert_eq!(f.read(0, 100), Some(vec![5; 100]));
        let _ = fs::remove_dir_all(&dir);
    }
}
