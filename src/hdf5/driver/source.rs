//! What the driver reads a file from (`Source`: the remote file, its
//! prefetch and crawl, its counters), and opening it as a configuration
//! string says: the I/O that [`super::config`]'s pure parse leaves out (a
//! disk cache opened, a CA file read, the environment, the network).

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Weak};

use crate::hdf5::explain::{Explanation, Hdf5Read, Structure, explain};
use crate::hdf5::meta::{MemType, What};
use crate::sync::Mutex;

use super::config;
use super::crawl::Crawler;
use super::many::Prefetched;
use super::prefetch::{PrefetchStats, Prefetcher};
use super::setup::{builder, check, new_prefetch};
use crate::error::Error;
use crate::file::RemoteFile;
use crate::process::workers::Closing;
use crate::sync::MadeIn;

/// What a driver file reads from, shared by every open of it and the fapl
/// copies HDF5 keeps. Freed when the last of those goes.
pub(crate) struct Source {
    pub file: RemoteFile,
    /// Set when HDF5 closes the file: its crawl and chunk read-ahead send
    /// no further request (other handles on the remote file are not
    /// concerned).
    pub closing: Closing,
    /// The metadata prefetch and the chunk read-ahead, if either is on.
    pub prefetch: Option<Arc<Mutex<Prefetcher>>>,
    /// The metadata prefetch's crawl ahead of HDF5, if it is on.
    pub crawler: Option<Crawler>,
    /// The last error a read met, for the error returned to the caller.
    pub last_error: Mutex<Option<Error>>,
    pub read_calls: AtomicU64,
    pub vector_calls: AtomicU64,
    /// Where HDF5's last read of raw data ended: a read that starts there
    /// goes on a stream, which the read-ahead serves.
    pub raw_end: AtomicU64,
    /// How many reads of raw data in a row each started where the last
    /// ended.
    pub raw_run: AtomicU64,
    /// Whether to print the file's statistics to standard error when the
    /// last open of it closes.
    report: std::sync::atomic::AtomicBool,
    /// HDF5's reads, kept when the configuration says `trace=on`, and how
    /// many came past the trace's bound.
    hdf5_reads: std::sync::OnceLock<Mutex<(Vec<Hdf5Read>, u64)>>,
    made_in: MadeIn,
}

static LIVE_READERS: AtomicUsize = AtomicUsize::new(0);

impl Source {
    pub fn new(file: RemoteFile, metadata: bool, chunks: bool) -> Arc<Source> {
        Source::prefetched(
            Prefetched {
                file,
                prefetch: None,
            },
            metadata,
            chunks,
        )
    }

    /// As [`new`](Self::new), for a file that a batch of many files opened
    /// and crawled ([`super::many`]): its crawl goes on from what that one
    /// found.
    pub fn prefetched(prefetched: Prefetched, metadata: bool, chunks: bool) -> Arc<Source> {
        LIVE_READERS.fetch_add(1, Relaxed);
        let Prefetched {
            file,
            prefetch: found,
        } = prefetched;
        let closing = Closing::default();
        let started = found.is_some();
        let prefetch = found.or_else(|| new_prefetch(&file, metadata, chunks));
        let crawler = match &prefetch {
            Some(p) if metadata => Some(Crawler::new(Arc::clone(p), file.clone(), closing.clone())),
            _ => None,
        };
        // The crawl starts now, from what opening the file fetched, while
        // HDF5 is still setting up (or goes on with what the batch's left).
        if let (Some(p), Some(crawler)) = (&prefetch, &crawler) {
            if started || p.lock().start() {
                crawler.wake();
            }
        }
        Arc::new(Source {
            file,
            closing,
            prefetch,
            crawler,
            last_error: Mutex::new(None),
            read_calls: AtomicU64::new(0),
            vector_calls: AtomicU64::new(0),
            raw_end: AtomicU64::new(u64::MAX),
            raw_run: AtomicU64::new(0),
            report: std::sync::atomic::AtomicBool::new(false),
            hdf5_reads: std::sync::OnceLock::new(),
            made_in: MadeIn::here(),
        })
    }

    /// Keeps HDF5's reads from now on (with the file's requests, which its
    /// builder keeps): for [`explanation`](Self::explanation).
    pub fn trace_reads(&self) {
        let _ = self.hdf5_reads.set(Mutex::new((Vec::new(), 0)));
    }

    /// Keeps HDF5's read of `len` bytes of `mem` at `addr`, if traced.
    pub fn note_read(&self, mem: MemType, addr: u64, len: u64) {
        let Some(reads) = self.hdf5_reads.get() else {
            return;
        };
        let known = self.prefetch.as_ref().and_then(|p| p.lock().what_at(addr));
        let read = Hdf5Read {
            structure: structure_of(mem, known),
            addr,
            len,
            at: self.file.trace_elapsed(),
        };
        let mut reads = reads.lock();
        if reads.0.len() < crate::trace::MOST_TRACED {
            reads.0.push(read);
        } else {
            reads.1 += 1;
        }
    }

    /// The account of the file's reads so far, round by round, if it was
    /// opened with `trace=on`.
    pub fn explanation(&self) -> Option<Explanation> {
        // An inherited trace's locks may be held by a parent's thread.
        if self.inherited() {
            return None;
        }
        let (reads, reads_left_out) = self.hdf5_reads.get()?.lock().clone();
        let (requests, requests_left_out) = self.file.traced_requests_counted();
        Some(explain(
            self.file.len(),
            &requests,
            &reads,
            reads_left_out.saturating_add(requests_left_out),
        ))
    }

    /// Whether this process only inherited it (a child forked from the one
    /// that opened it): its connections are the parent's, and its locks and
    /// waits may belong to parent threads that do not exist here, so the
    /// child neither reads through it nor frees it.
    pub fn inherited(&self) -> bool {
        self.made_in.inherited()
    }

    /// Prints the file's statistics to standard error when it closes.
    pub fn report_at_close(&self) {
        self.report.store(true, Relaxed);
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        LIVE_READERS.fetch_sub(1, Relaxed);
        let me = self as *const Source as usize;
        HANDED_OUT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(h, _)| *h != me);
        if self.report.load(Relaxed) {
            let s = self.file.stats();
            let p = self
                .prefetch
                .as_ref()
                .map(|p| p.lock().stats())
                .unwrap_or_default();
            let line = format!(
                "remfile: {}: {} requests in {} round trips, {} bytes fetched, {} bytes read; \
                 {} HDF5 reads, {} of {} metadata reads foreseen, {} chunk reads",
                self.file.url(),
                s.requests,
                s.round_trips,
                s.bytes_fetched,
                s.bytes_read,
                self.read_calls.load(Relaxed) + self.vector_calls.load(Relaxed),
                p.predicted_reads,
                p.predicted_reads + p.unpredicted_reads,
                p.chunk_reads,
            );
            super::report::report(tracing::Level::INFO, &line);
        }
    }
}

/// What the driver counted for one open file.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Counters {
    /// The remote file HDF5 reads from (a clone: its statistics are the
    /// file's).
    pub remote: RemoteFile,
    /// Read callbacks HDF5 made.
    pub read_calls: u64,
    /// Vector read callbacks HDF5 made (HDF5 1.14 and later).
    pub vector_calls: u64,
    /// What the metadata prefetch did (all zero when it is off).
    pub prefetch: PrefetchStats,
}

impl Source {
    /// The file's counters now.
    pub(crate) fn counters(&self) -> Counters {
        Counters {
            remote: self.file.clone(),
            read_calls: self.read_calls.load(Relaxed),
            vector_calls: self.vector_calls.load(Relaxed),
            // An inherited prefetch's lock may be held by a parent's thread.
            prefetch: match &self.prefetch {
                Some(p) if !self.inherited() => p.lock().stats(),
                _ => PrefetchStats::default(),
            },
        }
    }
}

/// The files whose driver handles were given out (`H5Fget_vfd_handle`), by
/// handle: a handle is looked up here, never dereferenced, so that one
/// that is stale, forged or of a file closed meanwhile finds nothing.
static HANDED_OUT: std::sync::Mutex<Vec<(usize, Weak<Source>)>> = std::sync::Mutex::new(Vec::new());

/// The driver handle of `source`, which [`source_of_handle`] finds while
/// it lives.
pub(crate) fn handle_of(source: &Arc<Source>) -> *mut c_void {
    let handle = Arc::as_ptr(source) as usize;
    let mut handed = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    if !handed
        .iter()
        .any(|(h, s)| *h == handle && s.strong_count() > 0)
    {
        handed.retain(|(h, _)| *h != handle);
        handed.push((handle, Arc::downgrade(source)));
    }
    handle as *mut c_void
}

/// How many handles are handed out now.
#[cfg(test)]
pub(crate) fn handles_handed_out() -> usize {
    HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner()).len()
}

/// The file whose driver handle is `handle`, if it is open.
pub(crate) fn source_of_handle(handle: *const c_void) -> Option<Arc<Source>> {
    let handed = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    handed
        .iter()
        .find(|(h, _)| *h == handle as usize)
        .and_then(|(_, s)| s.upgrade())
}

/// The counters of the open file whose driver handle (from
/// `H5Fget_vfd_handle`) is `handle`; `None` if it is not the handle of an
/// open file of this driver.
pub fn counters_of_handle(handle: *const c_void) -> Option<Counters> {
    source_of_handle(handle).map(|s| s.counters())
}

/// The account of the open file whose driver handle (from
/// `H5Fget_vfd_handle`) is `handle`, if it was opened with `trace=on`.
pub fn explanation_of_handle(handle: *const c_void) -> Option<Explanation> {
    source_of_handle(handle)?.explanation()
}

/// The remote file behind the open file whose driver handle (from
/// `H5Fget_vfd_handle`) is `handle`, for a caller that fetches what HDF5
/// will read (the chunks of a selection) before HDF5 asks for it; `None`
/// if it is not the handle of an open file of this driver.
pub fn remote_of_handle(handle: *const c_void) -> Option<RemoteFile> {
    source_of_handle(handle).map(|s| s.file.clone())
}

/// How many remote files the driver holds now.
#[cfg_attr(not(feature = "hdf5"), allow(dead_code))]
pub(crate) fn live_readers() -> usize {
    LIVE_READERS.load(Relaxed)
}

/// Opens the remote file at `url` as the configuration string `config`
/// says, for the driver. The error is a message for HDF5's error stack: the
/// bad key, or why the open failed (status, timeout…).
pub(crate) fn open_source(url: &str, config: &str) -> Result<Arc<Source>, String> {
    let config = config::parse(config).map_err(|e| e.to_string())?;
    check(&config).map_err(|e| e.to_string())?;
    if !is_remote(url) {
        // A local path (HDF5_DRIVER=remfile sends every open here).
        return Err(format!(
            "the remfile driver reads http://, https:// and s3:// URLs, not `{url}`: \
             open local files with another driver (in h5py, driver=\"sec2\")"
        ));
    }
    let metadata = config.metadata_prefetch();
    let chunks = config.chunk_read_ahead();
    let failed = |e: crate::error::Error| {
        // On the thread HDF5 called the driver on, with any interpreter's
        // lock held again.
        if let Some(host) = crate::wait::host() {
            host.failed_under_a_library(&e);
        }
        super::errno::with_errno(format!("cannot open the remote file: {e}"), &e)
    };
    // A wait for a batch's file that was stopped (Ctrl-C) fails the open.
    let source = match super::many::take_registered(url, &config).map_err(failed)? {
        Some(prefetched) => Source::prefetched(prefetched, metadata, chunks),
        None => {
            let file = builder(&config)
                .map_err(|e| e.to_string())?
                .open(url)
                .map_err(failed)?;
            Source::new(file, metadata, chunks)
        }
    };
    let from_env =
        std::env::var("REMFILE_STATS").is_ok_and(|v| config::parse_switch(&v) == Some(true));
    if config.stats() || from_env {
        source.report_at_close();
    }
    if config.trace() {
        source.trace_reads();
    }
    Ok(source)
}

/// The kind of structure HDF5's read of `mem` was, refined by what the
/// crawl knew lay there.
fn structure_of(mem: MemType, known: Option<What>) -> Structure {
    match (known, mem) {
        (Some(What::ContinuationV1 | What::ContinuationV2 { .. }), _) => {
            Structure::HeaderContinuation
        }
        // HDF5 reads global heap collections as raw data.
        (Some(What::GlobalHeap), _) => Structure::GlobalHeap,
        (Some(w), _) if w.lies_among_raw_data() => Structure::ChunkIndex,
        // Array headers are chunk indexes' (HDF5 reads them as headers).
        (Some(What::ArrayHeader), _) => Structure::ChunkIndex,
        (Some(What::FractalHeap { .. } | What::HeapDirect | What::HeapIndirect { .. }), _) => {
            Structure::FractalHeap
        }
        (Some(What::GroupNode | What::SymbolNode), _) => Structure::GroupIndex,
        (_, MemType::Superblock) => Structure::Superblock,
        (_, MemType::ObjectHeader) => Structure::ObjectHeader,
        (_, MemType::BTree) => Structure::GroupIndex,
        (_, MemType::LocalHeap) => Structure::LocalHeap,
        (_, MemType::GlobalHeap) => Structure::GlobalHeap,
        (_, MemType::RawData) => Structure::RawData,
        (_, MemType::Other) => Structure::OtherMetadata,
    }
}

/// Whether `name` is an `http://`, `https://` or `s3://` URL.
fn is_remote(name: &str) -> bool {
    let lower = name.get(..8).unwrap_or(name).to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://") || crate::s3::is_s3(name)
}

#[cfg(test)]
mod tests {
    use super::super::config::parse;
    use super::*;

    #[test]
    fn a_local_path_is_refused_with_a_hint() {
        assert!(
            is_remote("https://example.com/f.nwb")
                && is_remote("HTTP://x")
                && is_remote("s3://bucket/key")
        );
        assert!(!is_remote("/data/f.nwb") && !is_remote("s3:/bucket") && !is_remote("http"));
        let e = open_source("/data/f.nwb", "").err().unwrap();
        assert!(e.contains("/data/f.nwb") && e.contains("sec2"), "{e}");
    }

    #[test]
    fn the_settings_reach_the_builder() {
        assert!(builder(&parse("block_size=4096").unwrap()).is_ok());
        let dir_own = tempfile::tempdir().unwrap();
        let dir = dir_own.path().join("dir");
        let c = parse(&format!(
            "disk_cache={};disk_capacity=1GiB;cache_key=asset-1;revalidate_after=1d;immutable=on",
            dir.display()
        ))
        .unwrap();
        assert!(format!("{:?}", c.settings).contains("revalidate_after=1d"));
        let b = builder(&c).unwrap();
        assert!(b.disk_cache.is_some() && b.immutable);
        assert!(
            !builder(&parse("").unwrap()).unwrap().immutable,
            "off by default"
        );
        assert!(dir.join("blocks").is_dir(), "the disk cache opened");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn files_of_one_cache_capacity_share_one_block_cache() {
        let first = builder(&parse("cache=48MiB").unwrap())
            .unwrap()
            .cache
            .unwrap();
        let second = builder(&parse("cache=48MiB;block_size=4096").unwrap()).unwrap();
        assert!(first.is_the_same_cache(second.cache.as_ref().unwrap()));
        let other = builder(&parse("cache=96MiB").unwrap())
            .unwrap()
            .cache
            .unwrap();
        assert!(!first.is_the_same_cache(&other));
        assert_eq!(other.capacity(), 96 << 20);
    }

    #[test]
    fn two_files_configured_with_one_disk_cache_directory_share_one_cache() {
        let dir_own = tempfile::tempdir().unwrap();
        let dir = dir_own.path().join("dir");
        let config = |capacity: &str| {
            parse(&format!(
                "disk_cache={};disk_capacity={capacity}",
                dir.display()
            ))
            .unwrap()
        };
        let first = builder(&config("1GiB")).unwrap().disk_cache.unwrap();
        let second = builder(&config("2GiB")).unwrap().disk_cache.unwrap();
        assert!(
            first.is_the_same_cache(&second),
            "one scan, one queue, one writer"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn a_disk_cache_refused_is_left_out_and_the_file_opens() {
        use std::os::unix::fs::PermissionsExt;
        let dir_own = tempfile::tempdir().unwrap();
        let dir = dir_own.path().join("dir");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let c = parse(&format!("disk_cache={}", dir.display())).unwrap();
        assert!(builder(&c).unwrap().disk_cache.is_none());
        assert!(!dir.join("blocks").exists(), "nothing made in it");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_absurd_duration_is_refused_not_a_panic() {
        let Err(e) = open_source("http://127.0.0.1:9/x", "timeout=9223372036854775807s") else {
            panic!("opened");
        };
        assert!(e.contains("`timeout`"), "{e}");
        let Err(e) = open_source("http://127.0.0.1:9/x", "timeout=100d") else {
            panic!("opened");
        };
        // The key's own name, not the builder's.
        assert!(
            e.contains("`timeout`: must be positive") && !e.contains("read_timeout"),
            "{e}"
        );
    }

    #[test]
    fn a_value_out_of_range_names_its_key() {
        for (text, key) in [
            ("block_size=0", "block_size"),
            ("cache=1GiB;connections=0", "connections"),
            ("concurrency=100", "concurrency"),
            ("timeout=40d", "timeout"),
            ("connect_timeout=0s", "connect_timeout"),
        ] {
            let e = check(&parse(text).unwrap()).unwrap_err();
            assert_eq!(e.key, key, "{text}: {e}");
        }
        assert!(check(&parse("block_size=1MiB;connections=8;timeout=30s").unwrap()).is_ok());
        // Neither read nor opened here.
        assert!(check(&parse("ca_file=/nonexistent;disk_cache=/nonexistent").unwrap()).is_ok());
    }

    #[test]
    fn an_unreadable_ca_file_names_it() {
        let e = builder(&parse("ca_file=/nonexistent/ca.pem").unwrap()).unwrap_err();
        assert_eq!(e.key, "ca_file");
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    }
}
