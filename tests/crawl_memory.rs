//! The tables the HDF5 driver's metadata crawls keep stay within the
//! process's budget for them however many files are open: a test binary of
//! its own, so that the process's count is this test's files' alone (and
//! filling the budget slows no other test's crawl).
#![cfg(feature = "hdf5")]

use std::time::Duration;

use remfile::hdf5 as h5;
use remfile::hdf5::hdf5_metno as h5lib;
use remfile::process::CRAWL_MEMORY;
use remfile_testkit::{RangeServer, builder, h5files};

/// Chunks of the dataset: a chunk index of some 3,000 leaves.
const CHUNKS: usize = 100_000;

/// Elements of a chunk.
const CHUNK: usize = 4;

/// Opens of the file at once: more than the budget holds the indexes of.
const FILES: usize = 12;

fn value(i: usize) -> u16 {
    (i * 7 % 65_521) as u16
}

/// A file of one dataset of [`CHUNKS`] tiny chunks, indexed (as HDF5 1.10
/// and h5py write by default) by a version 1 B-tree the crawl reads whole.
fn write_many_chunks(path: &std::path::Path) -> h5lib::Result<()> {
    let file = h5::File::create(path)?;
    let data: Vec<u16> = (0..CHUNKS * CHUNK).map(value).collect();
    file.new_dataset::<u16>()
        .shape(CHUNKS * CHUNK)
        .chunk(CHUNK)
        .create("many")?
        .write_raw(&data)
}

/// The file opened once more, after its crawl has walked it (its chunk
/// index too): the crawl counts as background work until it is idle.
fn open_walked(server: &RangeServer) -> h5::File {
    let remote = builder().open(server.url("/many.h5")).expect("open");
    let file = h5::open(remote.clone()).expect("open as HDF5");
    assert!(remote.wait_for_background_fetches(Duration::from_secs(300)));
    file
}

fn table_bytes(file: &h5::File) -> u64 {
    h5::driver_info(file)
        .expect("a driver file")
        .prefetch
        .table_bytes
}

#[test]
fn many_files_with_large_chunk_indexes_stay_within_the_crawl_budget() {
    let path = h5files::temp_path!("many-chunks.h5");
    write_many_chunks(&path).expect("write the file");
    let server = RangeServer::new(std::fs::read(&path).expect("read it back"));
    let _ = std::fs::remove_file(&path);
    let files: Vec<h5::File> = (0..FILES).map(|_| open_walked(&server)).collect();
    let per_file: Vec<u64> = files.iter().map(table_bytes).collect();
    let total = remfile::hdf5::driver::crawl_table_bytes();
    eprintln!("{FILES} files of {CHUNKS} chunks: {total} bytes of tables, by file {per_file:?}");
    assert_eq!(per_file.iter().sum::<u64>(), total);
    assert!(total <= CRAWL_MEMORY, "{total}");
    // The first file kept its whole index (some 60 bytes a chunk), which
    // every file would have without the budget.
    assert!(per_file[0] > CHUNKS as u64 * 58, "{per_file:?}");
    assert!(per_file[0] * FILES as u64 > CRAWL_MEMORY);
    // The last found no room for its index, only for its addresses.
    assert!(per_file[FILES - 1] < per_file[0] / 4, "{per_file:?}");
    // It reads the same bytes all the same: only its read-ahead is less.
    let last = files.last().expect("files");
    let ds = last.dataset("many").expect("the dataset");
    let read = ds.read_slice_1d::<u16, _>(10_000..30_000).expect("a read");
    assert!(read.iter().copied().eq((10_000..30_000).map(value)));
    drop((read, ds));
    let remote = h5::driver_info(last).expect("a driver file").remote;
    assert!(remote.wait_for_background_fetches(Duration::from_secs(300)));
    // Closed files give their bytes back: one opened now keeps its whole
    // index again, and its tables are all the process holds.
    drop(files);
    assert_eq!(h5::open_remote_files(), 0);
    let again = open_walked(&server);
    assert!(table_bytes(&again) > CHUNKS as u64 * 58);
    assert_eq!(
        remfile::hdf5::driver::crawl_table_bytes(),
        table_bytes(&again)
    );
}
