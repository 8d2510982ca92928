//! The corpus: small files from several real writers (`benches/corpus.py`,
//! run with a Python that has h5py, pynwb, netCDF4, PyTables and h5netcdf
//! from PyPI), each opened and walked through the adapter as users walk
//! files: every group, dataset and attribute, each object's info and every
//! node of each chunk index. The walk takes at most 3 round trips, reads
//! the same values as a local read, and a slice after it pays no round trip
//! for its chunk index.
//!
//! They need such a Python (`bash .ci/run` makes one in `target/plugin-venv`),
//! and so are ignored by `cargo test` alone: `-- --ignored` runs them.
#![cfg(feature = "hdf5")]

use std::time::Duration;

use remfile::Link;
use remfile::hdf5 as h5;
use remfile_testkit::RangeServer;
use remfile_testkit::h5files;
use remfile_testkit::python::{CORPUS as FILES, small_corpus};

/// The server's delay before each answer.
const ROUND_TRIP: Duration = Duration::from_millis(20);

/// What a walk of the file at `path` gives: every object described, or the
/// error met (a file the linked HDF5 cannot read fails the same way
/// remotely).
fn described(file: &h5::File) -> Result<Vec<String>, String> {
    h5files::describe(file).map_err(|e| e.to_string())
}

/// Opens `name` of the corpus remotely (sizes that never depend on timing),
/// walks it as users do, then reads a slice of its largest chunked dataset;
/// checks rounds and values against the local file.
fn walk_one(name: &str) {
    // As opened by default, with sizes that never depend on timing.
    walk_with(name, h5::builder().link(Link::Ignored), 3);
    // At 25 MB/s and 30 ms per request, in small blocks: the open's tail
    // holds little of the metadata, and spans fill only gaps under 750 kB.
    let slow = Link::known(Duration::from_millis(30), 25_000_000);
    let small_blocks = h5::builder().block_size(64 << 10).open_tail(64 << 10);
    walk_with(name, small_blocks.link(slow), 3);
}

fn walk_with(name: &str, builder: remfile::Builder, most_rounds: u64) {
    let dir = small_corpus!();
    let path = dir.join(name);
    let local = match h5::File::open(&path) {
        Ok(f) => f,
        Err(e) => {
            // HDF5 1.10 cannot read what HDF5 2.x writes in its latest format.
            eprintln!(
                "SKIPPED {name}: HDF5 {:?} cannot open it locally: {e}",
                h5::library_version()
            );
            return;
        }
    };
    // A round trip far longer than parsing a wave, as on any real link:
    // without one, whether HDF5 or the crawl reaches a block first is up
    // to the scheduler, not to the prefetch.
    let server = RangeServer::new(std::fs::read(&path).unwrap()).with_hook(|_, reply| {
        remfile_testkit::time::late(ROUND_TRIP);
        reply
    });
    let file = h5::OpenOptions::new()
        .remote(builder)
        .open_url(server.url(&format!("/{name}")))
        .unwrap();
    let remote = h5::driver_info(&file).unwrap().remote;
    let objects = h5files::walk_all_info(&file).unwrap();
    let walked = remote.stats();
    assert!(remote.wait_for_background_fetches(Duration::from_secs(30)));
    let prefetch = h5::driver_info(&file).unwrap().prefetch;
    eprintln!(
        "{name}: {objects} objects, open + walk {} requests in {} round trips, {} bytes fetched \
         (then {} with the guesses); {prefetch:?}",
        walked.requests,
        walked.round_trips,
        walked.bytes_fetched,
        remote.stats().bytes_fetched
    );
    assert!(walked.round_trips <= most_rounds, "{name}: {walked:?}");
    assert!(
        prefetch.speculative_bytes <= prefetch.metadata_bytes + (16 << 20),
        "{name}: {prefetch:?}"
    );
    if let Some((dataset, first_chunk)) = largest_chunked(&local) {
        let before = remote.stats();
        let remote_ds = file.dataset(&dataset).unwrap();
        let got = h5files::checksum(&h5files::read_selection_bytes(&remote_ds, &first_chunk));
        let want = h5files::checksum(&h5files::read_selection_bytes(
            &local.dataset(&dataset).unwrap(),
            &first_chunk,
        ));
        assert_eq!(got, want, "{name}: {dataset}");
        let slice = remote.stats().since(&before);
        // The chunk's own bytes only: its index came with the walk.
        assert!(slice.round_trips <= 1, "{name}: {dataset}: {slice:?}");
    }
    assert_eq!(described(&file), described(&local), "{name}");
}

/// The chunked dataset with the most elements, and the selection of its
/// first chunk.
fn largest_chunked(file: &h5::File) -> Option<(String, Vec<std::ops::Range<usize>>)> {
    let (path, ds) = h5files::largest_chunked(file)?;
    let chunk = ds.chunk()?;
    let sel = chunk
        .iter()
        .zip(ds.shape())
        .map(|(&c, s)| 0..c.min(s))
        .collect();
    Some((path, sel))
}

#[test]
#[ignore = "needs target/plugin-venv (the corpus writers): bash .ci/run makes it; then cargo test --features hdf5 --test corpus -- --ignored"]
fn nwb_deep_walks_in_three_rounds() {
    walk_one(FILES[0]);
}

#[test]
#[ignore = "needs target/plugin-venv (the corpus writers): bash .ci/run makes it; then cargo test --features hdf5 --test corpus -- --ignored"]
fn nwb_ophys_walks_in_three_rounds() {
    walk_one(FILES[1]);
}

#[test]
#[ignore = "needs target/plugin-venv (the corpus writers): bash .ci/run makes it; then cargo test --features hdf5 --test corpus -- --ignored"]
fn nwb_icephys_walks_in_three_rounds() {
    walk_one(FILES[2]);
}

#[test]
#[ignore = "needs target/plugin-venv (the corpus writers): bash .ci/run makes it; then cargo test --features hdf5 --test corpus -- --ignored"]
fn netcdf4_walks_in_three_rounds() {
    walk_one(FILES[3]);
}

#[test]
#[ignore = "needs target/plugin-venv (the corpus writers): bash .ci/run makes it; then cargo test --features hdf5 --test corpus -- --ignored"]
fn h5py_track_order_v110_walks_in_three_rounds() {
    walk_one(FILES[4]);
}

#[test]
#[ignore = "needs target/plugin-venv (the corpus writers): bash .ci/run makes it; then cargo test --features hdf5 --test corpus -- --ignored"]
fn h5py_latest_walks_in_three_rounds() {
    walk_one(FILES[5]);
}

#[test]
#[ignore = "needs target/plugin-venv (the corpus writers): bash .ci/run makes it; then cargo test --features hdf5 --test corpus -- --ignored"]
fn h5py_gzip_walks_in_three_rounds() {
    walk_one(FILES[6]);
}

#[test]
#[ignore = "needs target/plugin-venv (the corpus writers): bash .ci/run makes it; then cargo test --features hdf5 --test corpus -- --ignored"]
fn pytables_walks_in_three_rounds() {
    walk_one(FILES[7]);
}

#[test]
#[ignore = "needs target/plugin-venv (the corpus writers): bash .ci/run makes it; then cargo test --features hdf5 --test corpus -- --ignored"]
fn h5netcdf_walks_in_three_rounds() {
    walk_one(FILES[8]);
}

/// A corpus file cut short, as a download that stopped would leave it (its
/// object headers, written last, gone): opened remotely it fails as it does
/// locally.
#[test]
#[ignore = "needs target/plugin-venv (the corpus writers): bash .ci/run makes it; then cargo test --features hdf5 --test corpus -- --ignored"]
fn a_truncated_file_fails_remotely_as_locally() {
    let dir = small_corpus!();
    let mut bytes = std::fs::read(dir.join("nwb_deep.nwb")).unwrap();
    bytes.truncate(bytes.len() * 9 / 10);
    let path = h5files::temp_path!("corpus-truncated.nwb");
    std::fs::write(&path, &bytes).unwrap();
    let local = h5::File::open(&path).map(drop).map_err(|e| e.to_string());
    let server = RangeServer::new(bytes);
    let remote = h5::OpenOptions::new()
        .remote(h5::builder().link(Link::Ignored))
        .open_url(server.url("/truncated.nwb"))
        .map(drop)
        .map_err(|e| e.to_string());
    let (Err(local), Err(remote)) = (local, remote) else {
        panic!("both fail")
    };
    assert!(local.contains("truncated file"), "{local}");
    assert!(remote.contains("truncated file"), "{remote}");
    let _ = std::fs::remove_file(&path);
}
