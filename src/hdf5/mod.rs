//! Open remote HDF5 and NWB files with the [`hdf5`](https://docs.rs/hdf5-metno)
//! crate (feature `hdf5`).
//!
//! [`open_url`] (or [`open`], for a [`RemoteFile`](crate::file::RemoteFile) opened with options of
//! your own) gives an ordinary [`File`] whose reads go through a read-only HDF5
//! virtual file driver backed by the remote file, with its block cache,
//! read-ahead, retries and validation. Everything else is the `hdf5` crate's
//! (re-exported as [`hdf5_metno`]), so `remfile::hdf5::File` *is*
//! `hdf5::File`:
//!
//! ```no_run
//! use remfile::hdf5;
//!
//! let file = hdf5::open_url("https://example.com/sub-01_ecephys.nwb")?;
//! let data = file.dataset("acquisition/ElectricalSeries/data")?;
//! println!("shape {:?}", data.shape());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Round trips
//!
//! * [`open_url`] fetches the superblock and the file's last [`OPEN_TAIL`]
//!   bytes at once: writers often put the root group's header and much other
//!   metadata at the end, so opening then costs one round trip.
//! * The metadata prefetch ([`OpenOptions::metadata_prefetch`], on by
//!   default) reads each piece of metadata HDF5 reads for what it points to
//!   (object headers, B-tree nodes, heaps…) and fetches that in the
//!   background, so that walking a file costs about as many round trips as
//!   the file is deep, not one per piece.
//! * [`prefetch_hyperslab`] fetches every chunk a slice touches in one round
//!   (after looking their addresses up in the chunk index), so reading the
//!   slice costs no round trip per chunk.
//!
//! # Versions
//!
//! The driver works with HDF5 1.10, 1.12, 1.14 and 2.x: it picks the layout of
//! HDF5's driver structures at run time from the library version. With HDF5
//! 1.14 and later it also answers vector reads, fetching all their ranges in
//! one round ([`RemoteFile::read_vectored_at`](crate::file::RemoteFile::read_vectored_at)). HDF5 makes them for datasets
//! without filters whose chunks are larger than its chunk cache (8 MiB by
//! default in 2.x): [`OpenOptions::chunk_cache`] with fewer bytes than a chunk
//! lets a whole uncompressed slice be read in one round.
//!
//! # Errors
//!
//! A failed remote read reaches the caller as an [`hdf5_metno::Error`] (the `hdf5`
//! crate's) whose message names the failing byte range and the cause (status,
//! timeout…). Opening returns an [`OpenError`], which also keeps the typed
//! [`crate::error::Error`] of the read that failed, if one did.
//!
//! # Threads
//!
//! HDF5 runs one call at a time (the `hdf5` crate holds a global lock), so
//! threads reading one file take turns; within a call, a large read still
//! fetches its parts concurrently.
//!
//! # The wing
//!
//! Everything HDF5 lives in this folder and reaches the rest of the crate
//! only through [`RemoteFile`](crate::file::RemoteFile) and its extension for drivers: the adapter
//! over the `hdf5` crate (`adapter/`, feature `hdf5`), the virtual file
//! driver itself (`driver/`: callbacks, metadata crawl, chunk read-ahead,
//! configuration; also built alone, feature `vfd`, for the plugin and the
//! Python package) and the parsers of HDF5's on-disk structures (`meta/`:
//! pure, with no HDF5 and no unsafe code).

#![warn(clippy::undocumented_unsafe_blocks)]
// Built for the plugin alone (feature `vfd`), the wing has no adapter: the
// docs above name its items all the same.
#![cfg_attr(not(feature = "hdf5"), allow(rustdoc::broken_intra_doc_links))]

#[cfg(feature = "hdf5")]
mod adapter;
#[cfg(any(feature = "hdf5", feature = "vfd"))]
#[doc(hidden)]
pub mod driver;
#[cfg(any(feature = "hdf5", feature = "vfd"))]
pub mod explain;
pub(crate) mod meta;
#[cfg(any(feature = "hdf5", feature = "vfd"))]
mod pieces;

#[cfg(feature = "hdf5")]
pub use adapter::*;
