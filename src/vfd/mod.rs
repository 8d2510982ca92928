//! The read-only HDF5 virtual file driver itself, apart from how it reaches
//! HDF5: the [`crate::hdf5`] module links the library and registers the
//! driver with it; the plugin in `hdf5-plugin/` is loaded by a program's own
//! HDF5 and takes that library's functions at run time ([`HostApi`]). Both
//! run the same callbacks, metadata prefetch and chunk read-ahead.
//!
//! Public for the plugin only: not a stable API.

#![warn(clippy::undocumented_unsafe_blocks)]

mod api;
pub(crate) mod chunk_ahead;
pub mod config;
mod crawl;
pub(crate) mod driver;
pub(crate) mod ffi;
pub(crate) mod prefetch;
pub mod source;
mod spans;

pub use api::{DriverConfig, DriverInfo, ErrorIds, HostApi, PushError, install};
pub use driver::{class_for, errno_of};
pub use ffi::{herr_t, hid_t};
pub use prefetch::PrefetchStats;
pub use source::{Counters, counters_of_handle, remote_of_handle};
