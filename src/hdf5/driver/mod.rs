//! The read-only HDF5 virtual file driver itself, apart from how it reaches
//! HDF5: the [`crate::hdf5`] module links the library and registers the
//! driver with it; the plugin in `hdf5-plugin/` is loaded by a program's own
//! HDF5 and takes that library's functions at run time ([`HostApi`]). Both
//! run the same callbacks, metadata prefetch and chunk read-ahead.
//!
//! Public for the plugin only: not a stable API.

#![warn(clippy::undocumented_unsafe_blocks)]

mod api;
pub(crate) mod caches;
pub(crate) mod callbacks;
pub(crate) mod chunk_ahead;
pub mod config;
mod crawl;
mod errno;
pub(crate) mod ffi;
pub mod file_object;
#[cfg(all(test, feature = "hdf5"))]
mod foresight;
#[cfg(all(feature = "vfd", unix))]
pub mod loader;
pub mod many;
pub(crate) mod prefetch;
mod reach;
mod report;
mod setup;
pub(crate) mod source;
mod spans;

#[cfg(feature = "hdf5")]
pub(crate) use api::ErrorIds;
pub use api::{HostApi, install};
pub use callbacks::class_for;
pub use errno::errno_of;
pub use ffi::{herr_t, hid_t};
pub use file_object::FileObjectCrawl;
pub use prefetch::PrefetchStats;
pub use report::print_reports_with;
pub use setup::{builder, check};
pub use source::{Counters, counters_of_handle, explanation_of_handle, remote_of_handle};

/// The bytes the metadata crawls' tables of the process's open driver
/// files hold now, of [`crate::process::CRAWL_MEMORY`].
pub fn crawl_table_bytes() -> u64 {
    crate::hdf5::driver::caches::crawl_bytes()
}
