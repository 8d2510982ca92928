//! The crawl for an HDF5 file read through a file object: h5py, h5netcdf
//! or xarray given a remote file object (Python's `RemoteFile`) rather than
//! the driver's name.
//!
//! HDF5 then reads through its file-object driver, which says nothing of
//! what each read is. The file's first bytes say it is HDF5 (its signature,
//! in the first block, which the open fetched): the metadata crawl starts
//! from the superblock as the driver's does, and each read the file object
//! serves is handed to the prefetch as the driver's read callback hands
//! HDF5's, so the crawl follows the reader and an open costs the driver's
//! rounds and bytes.

use std::sync::Arc;

use super::callbacks::{
    SIGNATURE, chunks_ahead_of, fetch_exactly_where_bytes_are_dear, look_ahead, stop_guessing,
};
use super::prefetch::{MAX_PIECE, PrefetchStats, SUPERBLOCK_READ};
use super::source::Source;
use crate::error::Result;
use crate::file::RemoteFile;
use crate::hdf5::meta::MemType;
use crate::hdf5::pieces;

/// The metadata crawl of an HDF5 file read through a file object; stopped
/// when dropped.
pub struct FileObjectCrawl {
    source: Arc<Source>,
}

impl FileObjectCrawl {
    /// A crawl of `file`'s metadata, started now, if the file begins with
    /// HDF5's signature in bytes already cached (the open's first block):
    /// looking costs no request. `None` for any other file.
    pub fn start_if_hdf5(file: &RemoteFile) -> Option<FileObjectCrawl> {
        let first = pieces::cached_from(file.extension(), 0, SIGNATURE.len());
        if first != SIGNATURE {
            return None;
        }
        let source = Source::new(file.clone(), true, true);
        Some(FileObjectCrawl { source })
    }

    /// Reads `buf.len()` bytes at `pos` as the file object's reader asked
    /// for them, and hands them to the crawl: a small read is likely a piece
    /// of metadata, which points to more. Where bytes are dear, a small
    /// read that misses the cache is fetched as its own bytes, as the
    /// driver's are.
    pub fn read_exact_at(&self, pos: u64, buf: &mut [u8]) -> Result<()> {
        let file = &self.source.file;
        let end = pos.saturating_add(buf.len() as u64);
        // A chunk a chunk index lists: the chunks after it come ahead, as
        // the driver's raw reads do.
        if chunks_ahead_of(&self.source, pos, buf.len() as u64) {
            return file.read_exact_at(pos, buf);
        }
        let small = buf.len() <= MAX_PIECE;
        let missed = small && !file.extension().is_cached(pos..end);
        if missed {
            fetch_exactly_where_bytes_are_dear(&self.source, pos..end);
        }
        file.read_exact_at(pos, buf)?;
        if small && !buf.is_empty() {
            // HDF5 reads the superblock (with the root group's entry) first.
            let mem = if pos < SUPERBLOCK_READ {
                MemType::Superblock
            } else {
                MemType::Other
            };
            look_ahead(&self.source, mem, pos, buf, missed);
        }
        Ok(())
    }

    /// Stops the crawl as the driver's close does: with a disk cache, it
    /// may finish first (a couple of seconds at most), so that the next run
    /// finds what it fetches on disk; then no further request.
    pub fn close(&self) {
        if !self.source.inherited() {
            stop_guessing(&self.source);
        }
    }

    /// What the crawl has done.
    pub fn stats(&self) -> PrefetchStats {
        self.source
            .prefetch
            .as_ref()
            .map(|p| p.lock().stats())
            .unwrap_or_default()
    }
}

impl Drop for FileObjectCrawl {
    fn drop(&mut self) {
        if self.source.inherited() {
            // Nothing of it is this process's to stop, or to free (its
            // locks may be held by the parent's threads).
            std::mem::forget(Arc::clone(&self.source));
            return;
        }
        if let Some(crawler) = &self.source.crawler {
            crawler.stop();
        }
        // What is in flight ends with its bodies (a disk cache may want
        // them); nothing more is sent.
        self.source.closing.close();
    }
}
