//! Damaged and hostile HDF5 files through the driver: HDF5 answers with an
//! error, as it does for the local copy, and the process lives on — no
//! allocation of what a file's lengths claim, no wait without end.
#![cfg(feature = "hdf5")]

use std::sync::atomic::Ordering;

use remfile::hdf5 as h5;
use remfile_testkit::{SPARSE_SIZE, builder, h5files, sparse_server};

/// Where each local heap (`HEAP`, version 0) of an HDF5 file with 8-byte
/// lengths says how long its data segment is.
fn local_heap_sizes(file: &[u8]) -> Vec<usize> {
    file.windows(5)
        .enumerate()
        .filter(|(_, w)| w == b"HEAP\0")
        .map(|(at, _)| at + 8)
        .collect()
}

/// Opens `bytes`, served as a file of 2^50 bytes (zeros after them), with
/// the driver's metadata prefetch and chunk read-ahead on, and walks it.
/// Returns the bytes the server sent.
fn open_and_walk_sparse(bytes: Vec<u8>) -> u64 {
    let (server, sent) = sparse_server(bytes);
    let opened = h5::OpenOptions::new()
        .remote(builder().block_size(64 << 10))
        .open_url(server.url("/hostile.h5"));
    if let Ok(file) = opened {
        // Errors are HDF5's answer to a damaged file; any is fine here.
        let _ = h5files::walk_metadata(&file);
    }
    sent.load(Ordering::SeqCst)
}

#[test]
fn a_local_heap_claiming_a_petabyte_is_an_error_not_an_abort() {
    // A pynwb file (h5py's defaults: symbol-table groups with local heaps),
    // as the driver's fuzz corpus keeps it (two bytes of choices first).
    let seed = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fuzz/corpus/hdf5_driver/seed-pynwb.nwb-0-0"
    );
    let mut bytes = std::fs::read(seed).unwrap()[2..].to_vec();
    let sizes = local_heap_sizes(&bytes);
    assert!(!sizes.is_empty(), "the file has local heaps");
    // Each heap, in turn, says its data runs to just short of the file's
    // (claimed) end.
    for at in sizes {
        let original = bytes[at..at + 8].to_vec();
        bytes[at..at + 8].copy_from_slice(&(SPARSE_SIZE - 4096).to_le_bytes());
        let sent = open_and_walk_sparse(bytes.clone());
        assert!(sent < 256 << 20, "{sent} bytes fetched for a heap at {at}");
        bytes[at..at + 8].copy_from_slice(&original);
    }
}
