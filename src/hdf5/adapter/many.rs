//! Many files' metadata fetched at once, for a survey of a dataset: the
//! Rust face of [`crate::hdf5::driver::many`].

use std::sync::Arc;
use std::time::Duration;

use super::{File, OpenError, OpenOptions, builder};
use crate::hdf5::driver::many::{Batch, Prefetched};
use crate::hdf5::driver::source::Source;

/// How far a [`PrefetchedFiles`] has gone.
pub use crate::hdf5::driver::many::Progress as PrefetchProgress;

/// The metadata of many HDF5 files being fetched at once, ahead of their
/// opens (see [`OpenOptions::prefetch_files`]). Dropping it stops what is
/// under way; the blocks fetched stay in the cache until evicted.
pub struct PrefetchedFiles {
    batch: Batch,
    options: OpenOptions,
}

impl std::fmt::Debug for PrefetchedFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefetchedFiles")
            .field("progress", &self.batch.progress())
            .finish_non_exhaustive()
    }
}

/// Starts fetching the metadata of the HDF5 files at `urls`, with
/// [`OpenOptions`]' defaults: see [`OpenOptions::prefetch_files`].
///
/// ```no_run
/// let urls = ["https://example.com/a.nwb", "https://example.com/b.nwb"];
/// let ahead = remfile::hdf5::prefetch_files(urls);
/// for url in urls {
///     let file = ahead.open(url)?;
///     println!("{url}: {:?}", file.member_names()?);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn prefetch_files<I>(urls: I) -> PrefetchedFiles
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    OpenOptions::new().prefetch_files(urls)
}

impl OpenOptions {
    /// Starts fetching the metadata of the HDF5 files at `urls`, all at
    /// once, in the background; [`PrefetchedFiles::open`] then opens each
    /// from memory.
    ///
    /// Opening one file after another costs each file's round trips in
    /// turn, however few; here up to [`FILES_AT_ONCE`](crate::hdf5::driver::many::FILES_AT_ONCE)
    /// files are opened and their metadata graphs crawled side by side
    /// (no HDF5 is involved), within the process's connections, into one
    /// block cache the files share (the [`remote`](Self::remote) builder's,
    /// or the process's shared cache of its capacity), and its disk cache
    /// if it has one. A file that fails here is opened afresh by its
    /// `open`, which reports its own error.
    ///
    /// The batch runs ahead of the opens within a bound: it starts no
    /// further file while those crawled and not opened yet hold half of the
    /// cache or number [`FILES_AHEAD`](crate::hdf5::driver::many::FILES_AHEAD); each
    /// open gives room back.
    ///
    /// ```no_run
    /// use remfile::hdf5::OpenOptions;
    ///
    /// let urls: Vec<String> = (0..100)
    ///     .map(|i| format!("https://example.com/session-{i}.nwb"))
    ///     .collect();
    /// let ahead = OpenOptions::new()
    ///     .remote(remfile::hdf5::builder().cache_capacity(1 << 30))
    ///     .prefetch_files(&urls);
    /// for url in &urls {
    ///     match ahead.open(url) {
    ///         Ok(file) => println!("{url}: {} attributes", file.attr_names()?.len()),
    ///         Err(e) => eprintln!("{url}: {e}"),
    ///     }
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn prefetch_files<I>(&self, urls: I) -> PrefetchedFiles
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let mut remote = self.remote.clone().unwrap_or_else(builder);
        if remote.cache.is_none() {
            // One bound for all the files' blocks.
            let shared = crate::hdf5::driver::caches::of_capacity(remote.cache_capacity);
            remote = remote.cache(shared);
        }
        let urls = urls.into_iter().map(|u| u.as_ref().to_owned());
        let switches = (self.metadata_prefetch, self.chunk_read_ahead);
        PrefetchedFiles {
            batch: Batch::start(urls, remote, None, switches),
            options: self.clone(),
        }
    }
}

impl PrefetchedFiles {
    /// Opens the HDF5 file at `url`: from what the batch fetched if it is
    /// one of its files (its metadata read from memory, or waited for if
    /// under way), otherwise as [`OpenOptions::open_url`] does.
    pub fn open(&self, url: impl AsRef<str>) -> Result<File, OpenError> {
        let url = url.as_ref();
        let options = &self.options;
        // A wait for the batch's work on it that was stopped fails the open.
        match self.batch.take(url).map_err(OpenError::from_remote)? {
            Some(prefetched) => options.open_reader(prefetched_source(prefetched, options)),
            None => {
                // With the batch's builder: into the cache its files share.
                let file = self.batch.builder().open(url);
                options.open(file.map_err(OpenError::from_remote)?)
            }
        }
    }

    /// How far the batch has gone.
    pub fn progress(&self) -> PrefetchProgress {
        self.batch.progress()
    }

    /// Waits until every file is crawled, failed or opened, or the batch
    /// waits for opens (its bound reached); `Interrupted` if the wait is
    /// stopped (see [`crate::wait`]).
    pub fn wait(&self) -> crate::error::Result<PrefetchProgress> {
        self.batch.wait(None)
    }

    /// As [`wait`](Self::wait), for `timeout` at most.
    pub fn wait_timeout(&self, timeout: Duration) -> crate::error::Result<PrefetchProgress> {
        self.batch.wait(Some(timeout))
    }

    /// The files that failed here, with why (their opens try again).
    pub fn errors(&self) -> Vec<(String, crate::error::Error)> {
        self.batch.errors()
    }

    /// Stops the batch: no further file starts, and requests under way
    /// end at once.
    pub fn cancel(&self) {
        self.batch.cancel();
    }
}

impl Drop for PrefetchedFiles {
    fn drop(&mut self) {
        self.batch.cancel();
    }
}

fn prefetched_source(prefetched: Prefetched, options: &OpenOptions) -> Arc<Source> {
    Source::prefetched(
        prefetched,
        options.metadata_prefetch,
        options.chunk_read_ahead,
    )
}
