//! A remote file as a Python object ([`Remote`]), the URL provider that
//! renews its URL, and a file's statistics as a dict.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use remfile::hdf5::driver::{self, FileObjectCrawl};
use remfile::wait::sync::{MadeIn, Mutex};
use remfile::{RemoteFile, Stats, wait};

use crate::errors::config_error;
use crate::host::{from_python, give_memory_back};
use crate::lifecycle::{EXITING, ReadFromPython};
use crate::options::parse;

/// A new URL from `provider.get_url()`, run with the GIL (the thread that
/// asks waits without it); an error if the interpreter is ending or the
/// call raised (its message, which the crate does not show with a URL).
fn renewed_url(provider: &Provider) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    // Counted as a read from Python (counted first, then the exit looked
    // at: the exit hook sets the flag, then waits for the count): the exit
    // waits for a call under way, and none starts once it has begun (a
    // thread that attaches as the interpreter finalizes is aborted).
    let _counted = ReadFromPython::enter();
    if EXITING.load(std::sync::atomic::Ordering::SeqCst) {
        return Err("the interpreter is ending: no URL could be asked for".into());
    }
    let renewed = Python::try_attach(|py| {
        let Some(provider) = provider.lock().as_ref().map(|p| p.clone_ref(py)) else {
            return Err("the URL provider was collected".to_owned());
        };
        provider
            .bind(py)
            .call_method0("get_url")
            .and_then(|url| url.extract::<String>())
            .map_err(|e| {
                format!(
                    "get_url() failed: {}",
                    e.get_type(py)
                        .name()
                        .map_or_else(|_| "an exception".to_owned(), |n| n.to_string())
                )
            })
    });
    match renewed {
        Some(Ok(url)) => Ok(url),
        Some(Err(why)) => Err(why.into()),
        None => Err("the interpreter is ending: no URL could be asked for".into()),
    }
}

/// A file on an HTTP(S) server, read at positions; closed by `close`.
///
/// A forked child that inherits one neither reads through it nor closes
/// it: its connections are the parent's, and its locks and waits may belong
/// to parent threads that do not exist in the child.
#[pyclass(frozen, module = "remfile_hdf5._native")]
pub(crate) struct Remote {
    file: Mutex<Option<RemoteFile>>,
    url: String,
    size: u64,
    /// The process that opened it.
    made_in: MadeIn,
    /// Whether its `close` closes the file (else it is the driver's, which
    /// its HDF5 file closes, and `close` only lets go of this handle).
    owned: bool,
    /// The metadata crawl of an HDF5 file read through this file object
    /// (h5py given it), if the file's signature says it is one.
    crawl: Mutex<Option<Arc<FileObjectCrawl>>>,
    /// The object that renews the URL, if given: shown to Python's garbage
    /// collector (a provider whose method's globals hold this file is a
    /// cycle, which would otherwise keep a module's objects, open HDF5
    /// files among them, past the interpreter's end).
    provider: Provider,
}

/// A URL provider the file's requests and its Python object share; empty
/// once the collector broke a cycle through it.
type Provider = Arc<Mutex<Option<Py<PyAny>>>>;

impl Remote {
    /// `file`, which an open HDF5 file of the driver's reads.
    pub(crate) fn sharing(file: RemoteFile) -> Remote {
        Remote::new_in_process(file, false, false)
    }

    /// `file`, opened by this process if `owned` (else the driver's); its
    /// metadata crawled ahead of its reader if `crawl` and its first bytes
    /// say it is an HDF5 file.
    fn new_in_process(file: RemoteFile, owned: bool, crawl: bool) -> Remote {
        // A file object of an HDF5 file is read as the driver reads one:
        // its metadata crawled ahead of the reader. (The driver's own file
        // has its crawl.)
        let crawl = (owned && crawl)
            .then(|| FileObjectCrawl::start_if_hdf5(&file))
            .flatten()
            .map(Arc::new);
        Remote {
            provider: Provider::default(),
            crawl: Mutex::new(crawl),
            url: file.url().to_owned(),
            size: file.len(),
            file: Mutex::new(Some(file)),
            made_in: MadeIn::here(),
            owned,
        }
    }

    /// The file, unless closed (a clone: reads share its cache).
    fn file(&self) -> PyResult<RemoteFile> {
        if self.inherited() {
            return Err(PyValueError::new_err(
                "this remote file was opened by another process (before a fork): open it again",
            ));
        }
        self.file
            .lock()
            .clone()
            .ok_or_else(|| PyValueError::new_err("I/O operation on closed file"))
    }

    /// Whether this process only inherited it.
    fn inherited(&self) -> bool {
        self.made_in.inherited()
    }

    /// Reads `buf.len()` bytes at `pos` of `file` (this one's), through
    /// the crawl if it has one.
    fn read_exact_at(&self, file: &RemoteFile, pos: u64, buf: &mut [u8]) -> remfile::Result<()> {
        let crawl = self.crawl.lock().clone();
        match crawl {
            Some(crawl) => crawl.read_exact_at(pos, buf),
            None => file.read_exact_at(pos, buf),
        }
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        if self.inherited() {
            // Its destructor would wait on the parent's threads.
            std::mem::forget(self.file.get_mut().take());
            std::mem::forget(self.crawl.get_mut().take());
        }
    }
}

#[pymethods]
impl Remote {
    /// Opens `url` with the settings of the configuration string `options`
    /// (the driver's keys; those that only HDF5 files use are refused).
    ///
    /// `url_provider`, if given, is an object whose `get_url()` returns the
    /// file's URL anew (a presigned URL that expired): called, with the GIL,
    /// when the server refuses a URL that worked before.
    #[new]
    #[pyo3(signature = (url, options, url_provider = None))]
    fn new(
        py: Python<'_>,
        url: &str,
        options: &str,
        url_provider: Option<Py<PyAny>>,
    ) -> PyResult<Remote> {
        let parsed = parse(options)?;
        let hdf5_only = [
            ("chunk_read_ahead", !parsed.chunk_read_ahead()),
            ("stats", parsed.stats()),
            ("trace", parsed.trace()),
        ];
        if let Some((key, _)) = hdf5_only.iter().find(|(_, set)| *set) {
            return Err(PyValueError::new_err(format!(
                "`{key}` applies to HDF5 files only, not to a file object"
            )));
        }
        // The driver's defaults, so that one table of defaults holds for both.
        let mut builder = driver::builder(&parsed).map_err(config_error)?;
        let provider = Provider::new(Mutex::new(url_provider));
        if provider.lock().is_some() {
            let asked = Arc::clone(&provider);
            builder = builder.url_provider(move || renewed_url(&asked));
        }
        let file = from_python(py, || builder.open(url))?;
        let mut remote = Remote::new_in_process(file, true, parsed.metadata_prefetch());
        remote.provider = provider;
        Ok(remote)
    }

    /// The file's length in bytes.
    #[getter]
    fn size(&self) -> u64 {
        self.size
    }

    /// The URL without its query string or credentials.
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        if let Some(provider) = self.provider.lock().as_ref() {
            visit.call(provider)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        // Dropped once the lock is let go of: its deallocation may run
        // Python code (a weak reference's callback) that switches threads.
        let provider = self.provider.lock().take();
        drop(provider);
    }

    /// The `ETag` the server gave the file, if it gave one.
    #[getter]
    fn etag(&self) -> PyResult<Option<String>> {
        Ok(self.file()?.etag().map(str::to_owned))
    }

    /// The `Last-Modified` date the server gave the file, if it gave one.
    #[getter]
    fn last_modified(&self) -> PyResult<Option<String>> {
        Ok(self.file()?.last_modified().map(str::to_owned))
    }

    /// Fetches the `(offset, length)` ranges into the file's cache,
    /// together (one round), as far as the cache holds them.
    fn _prefetch(&self, py: Python<'_>, ranges: Vec<(u64, u64)>) -> PyResult<()> {
        let mut wanted = Vec::with_capacity(ranges.len());
        for (offset, length) in ranges {
            let end = offset.checked_add(length).ok_or_else(|| {
                PyValueError::new_err(format!("a range of {length} bytes at {offset}"))
            })?;
            wanted.push(offset..end);
        }
        let file = self.file()?;
        from_python(py, || file.prefetch(wanted))
    }

    /// Fills the `n` bytes at `address` with the file's bytes at `pos`
    /// (inside the file), straight from the network or the cache: no
    /// second buffer. The caller keeps a writable buffer of at least `n`
    /// bytes at `address` exported (locked in place) for the whole call,
    /// and lets no other code touch it meanwhile.
    fn _read_into_address(
        &self,
        py: Python<'_>,
        pos: u64,
        address: usize,
        n: usize,
    ) -> PyResult<()> {
        let file = self.file()?;
        let end = pos.checked_add(n as u64).filter(|&end| end <= self.size);
        if end.is_none() {
            return Err(PyValueError::new_err(format!(
                "{n} bytes at {pos} lie past the end of the file ({} bytes)",
                self.size
            )));
        }
        if n == 0 {
            return Ok(());
        }
        if address == 0 {
            return Err(PyValueError::new_err("a null address"));
        }
        // SAFETY: the caller's promise above: `n` writable bytes at
        // `address`, which nothing else reads or writes during the call.
        let buf = unsafe { std::slice::from_raw_parts_mut(address as *mut u8, n) };
        from_python(py, || self.read_exact_at(&file, pos, buf))
    }

    /// Up to `n` bytes at `pos` (fewer only at the end of the file).
    fn read_at<'py>(&self, py: Python<'py>, pos: u64, n: usize) -> PyResult<Bound<'py, PyBytes>> {
        let file = self.file()?;
        let n = n.min(usize::try_from(self.size.saturating_sub(pos)).unwrap_or(usize::MAX));
        // Straight into the new bytes object, which no other thread sees
        // before it is returned.
        PyBytes::new_with(py, n, |buf| {
            if buf.is_empty() {
                return Ok(());
            }
            from_python(py, || self.read_exact_at(&file, pos, buf))
        })
    }

    /// Closes the file: reads waiting on it in other threads stop at once
    /// (a `ValueError`, as for a closed file of Python's), then its
    /// connections are let go of and its disk-cache writes waited for,
    /// without holding the GIL. Reads after it are a `ValueError`.
    fn close(&self, py: Python<'_>) {
        if self.inherited() {
            return;
        }
        let file = self.file.lock().take();
        let crawl = self.crawl.lock().take();
        let owned = self.owned;
        py.detach(move || {
            // The crawl first, as the driver's close does: what it has in
            // flight for a disk cache lands there.
            if let Some(crawl) = crawl {
                crawl.close();
            }
            if let Some(file) = file.as_ref().filter(|_| owned) {
                // Every clone of it: the reads in flight hold clones.
                file.close();
            }
            drop(file);
            give_memory_back();
        });
    }

    /// The bytes of each `(start, end)` range, fetched together.
    fn read_ranges<'py>(
        &self,
        py: Python<'py>,
        ranges: Vec<(u64, u64)>,
    ) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let file = self.file()?;
        let ranges: Vec<std::ops::Range<u64>> = ranges.into_iter().map(|(a, b)| a..b).collect();
        let parts = from_python(py, || file.read_ranges(&ranges))?;
        Ok(parts.iter().map(|p| PyBytes::new(py, p)).collect())
    }

    /// The file's statistics.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.file()?.stats())
    }

    /// Waits up to `seconds` for fetches started in the background to end.
    fn wait_for_background_fetches(&self, py: Python<'_>, seconds: f64) -> PyResult<bool> {
        if !(seconds >= 0.0 && seconds.is_finite()) {
            return Err(PyValueError::new_err(format!(
                "a timeout of {seconds} seconds"
            )));
        }
        let timeout = std::time::Duration::from_secs_f64(seconds.min(86_400.0));
        let file = self.file()?;
        let deadline = std::time::Instant::now() + timeout;
        // In steps, running signal handlers between them: Ctrl-C ends it.
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let step = left.min(wait::POLL);
            if py.detach(|| file.wait_for_background_fetches(step)) {
                return Ok(true);
            }
            py.check_signals()?;
            if left <= step {
                return Ok(false);
            }
        }
    }
}

pub(crate) fn stats_dict<'py>(py: Python<'py>, s: &Stats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("requests", s.requests)?;
    d.set_item("round_trips", s.round_trips)?;
    d.set_item("bytes_fetched", s.bytes_fetched)?;
    d.set_item("bytes_read", s.bytes_read)?;
    d.set_item("cache_hits", s.cache_hits)?;
    d.set_item("cache_misses", s.cache_misses)?;
    d.set_item("retries", s.retries)?;
    d.set_item("disk_hits", s.disk_hits)?;
    d.set_item("disk_bytes_read", s.disk_bytes_read)?;
    d.set_item("disk_waits", s.disk_waits)?;
    Ok(d)
}
