//! What the files of one process share, bounded however many are open.
//!
//! A survey opens dozens of files, a dask worker hundreds: every file
//! bringing its own connections, threads and connection budget made the
//! process's costs grow with the count of files (a TCP and TLS handshake
//! per file on the same host, a thread per crawl and per prefetch). Here
//! live the few things they share instead:
//!
//! | module | shared by the process's files |
//! |---|---|
//! | `agents` | one HTTP agent (connection pool) per kind of agent: a second file on a host reuses the first's warm connections |
//! | `budget` | the connections open to each origin at once, with the reads users wait for served before background fetches |
//! | `workers` | a few threads for background work (read-ahead, the HDF5 metadata crawl), and a bound on the threads concurrent fetches start |
//! | `caches` | one block cache per capacity for the files the HDF5 driver opens: one memory budget however many are open |
//!
//! Each is made again in a child forked from the process: the parent's
//! connections, counts and threads are not the child's (a connection used
//! by both would interleave their bytes), and the parent's locks may be
//! held for good there by threads the child does not have.
//!
//! The bounds, for any number of open files (see the README's "Many files
//! in one process"):
//! [`CONNECTIONS_PER_ORIGIN`] requests in flight to one origin,
//! [`IDLE_CONNECTIONS`] idle connections kept,
//! [`BACKGROUND_WORKERS`] + [`FETCH_THREADS`] threads.

pub(crate) mod agents;
pub(crate) mod budget;
#[cfg(any(feature = "hdf5", feature = "vfd"))]
pub(crate) mod caches;
pub(crate) mod workers;

/// The most requests in flight to one origin (scheme, host, port) across
/// the process's files. Background fetches may hold at most
/// [`BACKGROUND_CONNECTIONS_PER_ORIGIN`] of them, so that the reads users
/// wait for always find some.
pub const CONNECTIONS_PER_ORIGIN: usize = 72;

/// The most requests background fetches (read-ahead, the metadata crawl)
/// have in flight to one origin: as many as one remote HDF5 file's crawl
/// uses, so that one file's crawl is never slowed by the bound.
pub const BACKGROUND_CONNECTIONS_PER_ORIGIN: usize = 64;

/// The most idle connections the process keeps open for reuse, of which
/// at most [`CONNECTIONS_PER_ORIGIN`] to one origin.
pub const IDLE_CONNECTIONS: usize = 128;

/// The threads that run background work: read-ahead and the metadata
/// crawls of every open file. An idle one ends after
/// [`IDLE_WORKER_END`]; the next job starts it again.
pub const BACKGROUND_WORKERS: usize = 4;

/// How long an idle background worker waits for a job before it ends.
pub const IDLE_WORKER_END: std::time::Duration = std::time::Duration::from_secs(10);

/// The most threads started at once by fetches that send several requests
/// together (a large read split into parts, a crawl wave), beside the
/// thread each fetch runs on. Background fetches may take at most
/// [`BACKGROUND_CONNECTIONS_PER_ORIGIN`] of them.
pub const FETCH_THREADS: usize = CONNECTIONS_PER_ORIGIN;

/// How long a look-up waits for one of the process-wide tables here: each
/// is held only to look up or insert, so this is reached only in a child
/// forked while another thread held it (which never lets go there), and
/// then only once (see [`crate::sync::Wedged`]).
pub(crate) const TABLE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
