//! The `hdf5_driver` fuzz target's parts: its mutator ([`mutate_metadata`],
//! pure), and with feature `hdf5` the harness itself ([`hdf5_driver`]):
//! the whole HDF5 driver, through remfile's public API, over the in-memory
//! server ([`crate::memory`]), its walk compared with HDF5's own.
//!
//! The fuzz targets of remfile's pure parsers (`Content-Range`, the read
//! planner, the HDF5 metadata parsers) stay in remfile (`remfile::fuzzing`,
//! feature `fuzzing`): they call its private functions.

#[cfg(feature = "hdf5")]
mod describe;
#[cfg(feature = "hdf5")]
mod driver;
mod mutate;
#[cfg(feature = "hdf5")]
mod walk;

#[cfg(feature = "hdf5")]
pub use self::describe::MAX_READ;
#[cfg(feature = "hdf5")]
pub use self::driver::{
    HEADER_LEN, Input, MAX_REFERENCE_LEN, REFERENCE_ONLY, hdf5_driver, hdf5_driver_walk,
};
pub use self::mutate::{SIGNATURES, mutate_metadata};
#[cfg(feature = "hdf5")]
pub use self::walk::MAX_STEPS;
