//! What the HDF5 driver (`hdf5/driver/`, `hdf5/adapter/`) may ask of a remote file beyond
//! reading it: the engine's extension API, and all of it. Reads, vectored
//! reads and prefetches are the file's public methods; this adds what only
//! a reader that knows the file's layout can use:
//!
//! - **cache probes**: whether bytes are cached, the cached bytes from a
//!   position, with no request;
//! - **background fetches of spans**, stopped when the driver's handle
//!   closes, and a count of background work that readers can wait for;
//! - **a side store** beside the blocks, put there by the driver (its
//!   pieces: exact small ranges kept on disk across runs), and **exact
//!   ranges fetched without their blocks** to fill it;
//! - **facts that size the driver's own plans**: the link's estimate, the
//!   concurrency a guess may use, the read-ahead's bounds, whether a disk
//!   cache holds the file.

#![cfg_attr(not(feature = "extension"), allow(dead_code))]

use std::ops::Range;
use std::sync::Arc;

use crate::cache::Keeper;
use crate::cache::SideStore;
use crate::engine::{BackgroundWork, Engine, SideStoreSetup};
use crate::link::LinkEstimate;
use crate::process::workers::{self, Closing, Job, Priority};
use crate::s3::S3Options;
use crate::s3::credentials::Credentials;
use crate::stats::RoundMark;

impl crate::file::RemoteFile {
    /// What the HDF5 driver may ask of the file beyond reads (see
    /// [`Extension`]).
    pub(crate) fn extension(&self) -> Extension<'_> {
        Extension::of(self.engine())
    }
}

/// A file as the driver sees it (from
/// [`RemoteFile::extension`](crate::file::RemoteFile)).
#[derive(Clone, Copy)]
pub(crate) struct Extension<'f> {
    engine: &'f Arc<Engine>,
}

impl<'f> Extension<'f> {
    pub(crate) fn of(engine: &'f Arc<Engine>) -> Extension<'f> {
        Extension { engine }
    }

    /// Whether every block covering `range` is cached.
    pub(crate) fn is_cached(self, range: Range<u64>) -> bool {
        self.engine.is_cached(range)
    }

    /// The file's size in bytes.
    pub(crate) fn size(self) -> u64 {
        self.engine.size()
    }

    /// See [`Engine::cached_from`].
    pub(crate) fn cached_from(self, pos: u64, max: usize) -> Vec<u8> {
        self.engine.cached_from(pos, max)
    }

    /// See [`Engine::guess_link_estimate`].
    pub(crate) fn guess_link_estimate(self) -> Option<LinkEstimate> {
        self.engine.guess_link_estimate()
    }

    /// See [`Engine::guessing_on_line`].
    pub(crate) fn guessing_on_line(self) -> crate::link::AtWork {
        self.engine.guessing_on_line()
    }

    /// See [`Engine::line_sharing`].
    pub(crate) fn line_sharing(self) -> u64 {
        self.engine.line_sharing()
    }

    /// See [`Engine::guess_concurrency`].
    pub(crate) fn guess_concurrency(self) -> u64 {
        self.engine.guess_concurrency()
    }

    /// The least and the most bytes a sequential stream reads ahead now
    /// (the least follows the link).
    pub(crate) fn read_ahead_bounds(self) -> (u64, u64) {
        self.engine.read_ahead_bounds()
    }

    /// See [`Engine::has_disk_cache`].
    pub(crate) fn has_disk_cache(self) -> bool {
        self.engine.has_disk_cache()
    }

    /// See [`Engine::prefetch_here`].
    pub(crate) fn prefetch_here(
        self,
        ranges: impl IntoIterator<Item = Range<u64>>,
        max_bytes: u64,
    ) -> u64 {
        self.engine.prefetch_here(ranges, max_bytes)
    }

    /// As [`RemoteFile::prefetch_in_background`](crate::file::RemoteFile::prefetch_in_background),
    /// as background work that `closing` stops, leaving out the blocks of
    /// `leaving`, which the caller is about to read.
    pub(crate) fn prefetch_in_background_until_closed(
        self,
        ranges: impl IntoIterator<Item = Range<u64>>,
        max_bytes: u64,
        closing: &Closing,
        leaving: Range<u64>,
    ) -> u64 {
        self.engine
            .prefetch_in_background(ranges, max_bytes, Some(closing), leaving)
    }

    /// See [`Engine::background_work`].
    pub(crate) fn background_work(self) -> BackgroundWork {
        self.engine.background_work()
    }

    /// See [`Engine::side_store`].
    pub(crate) fn side_store<S: SideStore>(
        self,
        make: impl FnOnce(SideStoreSetup<'_>) -> S,
    ) -> Option<&'f S> {
        self.engine.side_store(make)
    }

    /// See [`Engine::keeper`].
    pub(crate) fn keeper(self) -> Option<&'f dyn Keeper> {
        self.engine.keeper()
    }

    /// See [`Engine::round_mark`].
    pub(crate) fn round_mark(self) -> RoundMark {
        self.engine.round_mark()
    }

    /// See [`Engine::take_from_disk`].
    pub(crate) fn take_from_disk(self, ranges: impl IntoIterator<Item = Range<u64>>) {
        self.engine.take_from_disk(ranges);
    }

    /// See [`Engine::fetch_exact`].
    pub(crate) fn fetch_exact(
        self,
        ranges: Vec<Range<u64>>,
        deliver: impl FnMut(Range<u64>, Option<Vec<u8>>),
    ) {
        self.engine.fetch_exact(ranges, deliver);
    }
}

/// What a wing does with the background work of its handle on a file.
impl Closing {
    /// No further request: the requests in flight end with their bodies
    /// (what they bring may be wanted on disk, for the next run).
    pub(crate) fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Closes, and ends every wait of the background work at once, the
    /// requests in flight too.
    pub(crate) fn cancel(&self) {
        self.close();
        self.cancel.cancel();
    }

    /// Runs `f` as background work of the file: the work that begins in it
    /// waits by [`stop`](Self::stop).
    pub(crate) fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        self.stop().in_scope(f)
    }
}

/// Queues a wave of a wing's crawl for a background worker, after the
/// read-ahead queued (see [`workers::submit`]).
pub(crate) fn submit_crawl(job: impl FnOnce() + Send + 'static) -> Result<(), Job> {
    workers::submit(Priority::Crawl, job)
}

/// What a wing sets of the S3 options beyond the builder's methods.
impl S3Options {
    /// Sets one part of the keys (the driver's configuration gives them one
    /// by one); [`validate`](S3Options::validate) checks that they go together.
    pub(crate) fn key_part(mut self, part: KeyPart, value: String) -> Self {
        let keys = self.keys.get_or_insert_with(|| Credentials {
            key_id: String::new(),
            secret: String::new(),
            token: None,
            expires: None,
        });
        match part {
            KeyPart::Id => keys.key_id = value,
            KeyPart::Secret => keys.secret = value,
            KeyPart::Token => keys.token = Some(value),
        }
        self
    }
}

/// One part of a set of keys.
#[derive(Debug, Clone, Copy)]
pub(crate) enum KeyPart {
    Id,
    Secret,
    Token,
}

/// What a wing (and a host, through `wait::sync`) does with the crate's
/// locks beyond the core's use.
impl<T> crate::sync::Mutex<T> {
    /// The value, through a unique borrow (no locking): for a value a
    /// forked child inherited, whose lock a parent's thread may hold.
    pub fn get_mut(&mut self) -> &mut T {
        self.0
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
