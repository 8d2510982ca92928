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
//!
//! Each is made again in a child forked from the process: the parent's
//! connections, counts and threads are not the child's (a connection used
//! by both would interleave their bytes), and the parent's locks may be
//! held for good there by threads the child does not have.
//!
//! The bounds, for any number of open files (see docs/hdf5.md, "Many files
//! in one process"):
//! [`CONNECTIONS_PER_ORIGIN`] requests in flight to one origin,
//! [`IDLE_CONNECTIONS`] idle connections kept,
//! [`BACKGROUND_WORKERS`] + [`FETCH_THREADS`] threads, and for the files
//! the HDF5 driver opens (its own tables are the wing's: a block cache per
//! capacity, with a quarter of it, at most 64 MiB, for the pieces their
//! crawls fetched exactly) [`CRAWL_MEMORY`] bytes for the tables their
//! crawls keep.

pub(crate) mod agents;
pub(crate) mod budget;
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

/// The most bytes the tables of the HDF5 driver's metadata crawls keep, for
/// all the process's open files together: the addresses metadata pointed
/// to, the fractal heaps and version 2 B-trees to read later pieces with,
/// the targets not yet fetched, the piece of metadata read last, and the
/// chunk indexes with the chunks a run asked for. Each table weighs what
/// it allocates (a hash table its buckets, a vector its capacity, a B-tree
/// entry a fifth of a node) and takes that from this budget before it
/// grows; one that cannot stops growing, and a closed file gives its bytes
/// back. Past the budget the crawl predicts less: its fetches are only
/// ever guesses, so HDF5 still reads every byte it needs.
///
/// A quarter of the default block cache, as for the pieces the crawls
/// fetch: 1,000 open files each with a million-chunk dataset would
/// otherwise keep some 60 GB of chunk indexes, 200 times the cache. A
/// chunk weighs about 60 bytes (its B-tree entry and its place in its
/// leaf), so the indexes' share ([`CRAWL_CHUNK_MEMORY`]) holds some
/// 850,000 chunks: the indexes of eight open files of 100,000 chunks each.
/// An address metadata pointed to weighs 38 to 75 bytes (its hash table
/// between full and just grown), so 1,000 files of up to 850 addresses
/// each (a few hundred objects) take half the budget.
///
/// Besides it, each wave of targets being fetched is the crawl's working
/// memory (at most [`BACKGROUND_WORKERS`] waves at once).
pub const CRAWL_MEMORY: u64 = 64 << 20;

/// The most bytes of [`CRAWL_MEMORY`] that the chunk indexes of all files
/// take together: three quarters, so that the last quarter stays for the
/// addresses every file's walk needs, however large one file's index.
pub const CRAWL_CHUNK_MEMORY: u64 = CRAWL_MEMORY / 4 * 3;
