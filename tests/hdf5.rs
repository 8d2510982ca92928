//! Remote HDF5 files read through the driver equal the same files read from disk.
#![cfg(feature = "hdf5")]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use remfile::hdf5 as h5;
use remfile::hdf5::hdf5_metno as h5lib;
use remfile_testkit::h5files::{
    self, NWB_CHUNK_ROWS, NWB_COLS, describe, nwb_value, temp_path, write_nwb_like, write_rich,
};
use remfile_testkit::{RangeServer, Reply, builder};

fn rich_file() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let p = temp_path!("rich.h5");
        write_rich(&p).expect("write the rich test file");
        p
    })
}

fn nwb_file() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let p = temp_path!("nwb-like.nwb");
        write_nwb_like(&p).expect("write the NWB-like test file");
        p
    })
}

/// Rows of the NWB-like data, read through HDF5, flattened.
fn read_rows(ds: &h5::Dataset, rows: std::ops::Range<usize>) -> Vec<i16> {
    ds.read_slice_2d::<i16, _>((rows, ..))
        .unwrap()
        .into_iter()
        .collect()
}

/// The same rows as written.
fn expected_rows(rows: std::ops::Range<usize>) -> Vec<i16> {
    rows.flat_map(|r| (0..NWB_COLS).map(move |c| nwb_value(r, c)))
        .collect()
}

fn serve(path: &PathBuf) -> RangeServer {
    RangeServer::new(std::fs::read(path).expect("read the test file"))
}

/// As [`serve`], each answer 10 ms late: a race between the crawl and
/// HDF5 is then decided by the network, as on a real link, not by which
/// thread a busy machine runs first.
fn serve_far_away(path: &PathBuf) -> RangeServer {
    serve_at_distance(path, Duration::from_millis(10))
}

/// As [`serve`], each answer `delay` late (a link's round trip).
fn serve_at_distance(path: &PathBuf, delay: Duration) -> RangeServer {
    serve(path).with_hook(move |_, reply| {
        remfile_testkit::time::late(delay);
        reply
    })
}

fn open_remote(server: &RangeServer, name: &str) -> (h5::File, remfile::RemoteFile) {
    let remote = builder().open(server.url(name)).expect("open over HTTP");
    let file = h5::open(remote.clone()).expect("open as HDF5");
    (file, remote)
}

#[test]
fn a_rich_file_reads_the_same_remotely_and_locally() {
    let server = serve(rich_file());
    let (remote, _) = open_remote(&server, "/rich.h5");
    let local = h5::File::open(rich_file()).unwrap();
    let (r, l) = (describe(&remote).unwrap(), describe(&local).unwrap());
    assert!(l.len() > 100, "the walk saw everything: {}", l.len());
    assert_eq!(r, l);
}

#[test]
fn an_nwb_like_file_reads_the_same_remotely_and_locally() {
    let server = serve(nwb_file());
    let (remote, _) = open_remote(&server, "/f.nwb");
    let local = h5::File::open(nwb_file()).unwrap();
    assert_eq!(describe(&remote).unwrap(), describe(&local).unwrap());
}

#[test]
fn open_and_one_chunk_cost_few_requests_and_a_re_read_none() {
    let server = serve(nwb_file());
    let (file, remote) = open_remote(&server, "/f.nwb");
    let opened = remote.stats();
    assert!(opened.requests <= 3, "open: {opened:?}");
    let ds = file.dataset("acquisition/ElectricalSeries/data").unwrap();
    let before = remote.stats();
    let rows = 5 * NWB_CHUNK_ROWS + 100..5 * NWB_CHUNK_ROWS + 200;
    let got = read_rows(&ds, rows.clone());
    let want = expected_rows(rows.clone());
    assert_eq!(got, want);
    let one = remote.stats().since(&before);
    eprintln!("open: {opened:?}\none chunk: {one:?}");
    assert!(one.round_trips <= 2, "one chunk: {one:?}");
    let before = remote.stats();
    let again = read_rows(&ds, rows.start + 1..rows.end);
    assert_eq!(again, want[NWB_COLS..]);
    assert_eq!(
        remote.stats().since(&before).requests,
        0,
        "a cached re-read"
    );
}

#[test]
fn one_channel_of_chunks_larger_than_the_chunk_cache_takes_a_few_rounds() {
    let server = serve(nwb_file());
    // The defaults: HDF5 1.10's chunk cache (1 MiB) holds no 2 MiB chunk, so
    // HDF5 reads the column from the file an element at a time. The link is
    // a field's (30 ms, 25 MB/s), not the one measured here: parts are then
    // no shorter than 750 KB whatever the machine's load.
    let field = remfile::Link::known(Duration::from_millis(30), 25_000_000);
    let file = h5::OpenOptions::new()
        .remote(h5::builder().link(field))
        .open_url(server.url("/f.nwb"))
        .unwrap();
    let remote = h5::driver_info(&file).unwrap().remote;
    let ds = file.dataset("acquisition/ElectricalSeries/data").unwrap();
    let rows = 20_000..280_000;
    let before = remote.stats();
    let got = ds.read_slice_1d::<i16, _>((rows.clone(), 5)).unwrap();
    let cost = remote.stats().since(&before);
    let want: Vec<i16> = rows.clone().map(|r| nwb_value(r, 5)).collect();
    assert!(got.iter().copied().eq(want), "the column differs");
    let info = h5::driver_info(&file).unwrap().prefetch;
    eprintln!("one channel: {cost:?}; {info:?}");
    // Sixteen chunks, each 16 blocks of 128 KiB: a round trip per block
    // before the chunk read-ahead saw a chunk read in pieces as a stream.
    assert!(cost.round_trips <= 6, "{cost:?}");
    // Parts of at least 750 KB: at most three per 2 MiB chunk.
    assert!(cost.requests <= 3 * 16, "{cost:?}");
    // The chunks the column crosses, and at most a step past them.
    let chunks = (rows.end.div_ceil(NWB_CHUNK_ROWS) - rows.start / NWB_CHUNK_ROWS) as u64;
    let chunk_bytes = (NWB_CHUNK_ROWS * NWB_COLS * 2) as u64;
    assert!(cost.bytes_fetched <= (chunks + 2) * chunk_bytes, "{cost:?}");
}

#[test]
fn a_warm_open_and_walk_through_a_disk_cache_is_one_request_and_none_if_immutable() {
    let server = serve_far_away(nwb_file());
    let local = h5::File::open(nwb_file()).unwrap();
    let dir = temp_path!("warm-walk-disk");
    let _ = std::fs::remove_dir_all(&dir);
    let mut requests = Vec::new();
    // Cold, warm, and warm for a URL whose object never changes.
    for immutable in [false, false, true] {
        let disk = remfile::DiskCache::open(&dir, 1 << 30).unwrap();
        let remote = builder()
            .disk_cache(disk.clone())
            .immutable(immutable)
            .open(server.url("/f.nwb"))
            .unwrap();
        let file = h5::open(remote.clone()).unwrap();
        assert_eq!(describe(&file).unwrap(), describe(&local).unwrap());
        drop(file);
        assert!(remote.wait_for_background_fetches(Duration::from_secs(20)));
        requests.push(remote.stats().requests);
        drop(remote);
        assert!(disk.flush(Duration::from_secs(20)));
    }
    // The crawl fetched the metadata as pieces, kept on disk beside the
    // blocks HDF5 read: the warm run's only request is the open's, and an
    // immutable file's warm run sends none.
    let kept = std::fs::read_dir(dir.join("blocks"))
        .unwrap()
        .flatten()
        .any(|d| d.path().join("pieces").is_file());
    assert!(kept, "no pieces kept");
    assert!(requests[0] > 1, "{requests:?}");
    assert_eq!(requests[1..], [1, 0], "{requests:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn files_sharing_a_cache_too_small_for_their_pieces_walk_right_on_blocks() {
    let server = serve_far_away(nwb_file());
    let local = h5::File::open(nwb_file()).unwrap();
    // A quarter of the cache for the pieces of both files: less than one
    // file's crawl fetches as pieces.
    let cache = remfile::BlockCache::new(2 << 20);
    let mut held = Vec::new();
    let mut requests = Vec::new();
    for _ in 0..3 {
        let remote = builder()
            .cache(cache.clone())
            .open(server.url("/f.nwb"))
            .unwrap();
        let file = h5::open(remote.clone()).unwrap();
        assert_eq!(describe(&file).unwrap(), describe(&local).unwrap());
        assert!(remote.wait_for_background_fetches(Duration::from_secs(20)));
        requests.push(remote.stats().requests);
        held.push((file, remote));
    }
    // Later files find the budget taken and guess blocks instead: a few
    // requests more at most, never a request per read.
    assert!(
        requests.iter().all(|&r| r <= 2 * requests[0] + 8),
        "{requests:?}"
    );
}

#[test]
fn a_persistent_503_becomes_an_error_naming_the_status() {
    let server = serve(nwb_file());
    let remote = builder()
        .retry_policy(
            remfile::RetryPolicy::default()
                .max_retries(1)
                .initial_backoff(std::time::Duration::from_millis(1)),
        )
        .open(server.url("/f.nwb"))
        .unwrap();
    let file = h5::open(remote).unwrap();
    let ds = file.dataset("acquisition/ElectricalSeries/data").unwrap();
    server.set_hook(|_, _| Reply::new(503).body("try later"));
    let err = ds
        .read_slice_2d::<i16, _>((200_000..200_010, ..))
        .unwrap_err();
    let text = err.to_string();
    eprintln!("{text}");
    assert!(text.contains("503"), "{text}");
    assert!(text.contains("bytes"), "names the range: {text}");
}

#[test]
fn write_access_is_refused() {
    let server = serve(rich_file());
    let (file, _) = open_remote(&server, "/rich.h5");
    assert!(file.create_group("new").is_err());
    assert!(file.new_attr::<i32>().create("new").is_err());
}

#[test]
fn opening_a_file_that_is_not_hdf5_fails_cleanly() {
    let server = RangeServer::new(b"definitely not an HDF5 file".repeat(1000));
    let remote = builder().open(server.url("/x")).unwrap();
    let err = h5::open(remote).unwrap_err();
    assert!(err.hdf5().is_some());
    assert!(err.remote().is_none());
    assert!(err.to_string().contains("HDF5"), "{err}");
}

#[test]
fn a_network_failure_at_open_keeps_the_typed_error() {
    let server = serve(rich_file());
    let cache = remfile::BlockCache::new(64 << 20);
    let remote = builder()
        .cache(cache.clone())
        .retry_policy(remfile::RetryPolicy::never())
        .open(server.url("/rich.h5"))
        .unwrap();
    // Nothing cached: HDF5's first read at open asks the server.
    cache.clear();
    server.set_hook(|_, _| Reply::new(404));
    let err = h5::open(remote).unwrap_err();
    let typed = err.remote().expect("the remote error");
    assert_eq!(typed.kind(), remfile::ErrorKind::HttpStatus(404));
    let io: std::io::Error = err.into();
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn four_threads_read_through_one_file() {
    let server = serve(nwb_file());
    let (file, _) = open_remote(&server, "/f.nwb");
    let ds = file.dataset("acquisition/ElectricalSeries/data").unwrap();
    std::thread::scope(|s| {
        for t in 0..4usize {
            let ds = ds.clone();
            s.spawn(move || {
                for k in 0..5 {
                    let start = (t * 61_000 + k * 9_000) % 290_000;
                    let rows = start..start + 500;
                    let got = read_rows(&ds, rows.clone());
                    let want = expected_rows(rows);
                    assert_eq!(got, want, "thread {t}, read {k}");
                }
            });
        }
    });
}

#[test]
fn driver_info_counts_reads() {
    let server = serve(rich_file());
    let (file, remote) = open_remote(&server, "/rich.h5");
    let info = h5::driver_info(&file).expect("a file of this driver");
    assert!(info.read_calls > 0);
    assert_eq!(info.remote.url(), remote.url());
    let local = h5::File::open(rich_file()).unwrap();
    assert!(h5::driver_info(&local).is_none());
}

#[test]
fn the_driver_refuses_to_open_for_writing() {
    let server = serve(rich_file());
    let (file, _) = open_remote(&server, "/rich.h5");
    // A copy of the file's access property list carries the driver and its reader.
    let refused = h5lib::sync::sync(|| unsafe {
        let fapl = hdf5_sys::h5f::H5Fget_access_plist(file.id());
        assert!(fapl >= 0);
        let name = c"remote".as_ptr();
        let rdwr = hdf5_sys::h5f::H5Fopen(name, hdf5_sys::h5f::H5F_ACC_RDWR, fapl);
        let trunc = hdf5_sys::h5f::H5Fcreate(name, hdf5_sys::h5f::H5F_ACC_TRUNC, 0, fapl);
        let stack = h5lib::Error::query()
            .map(|e| e.to_string())
            .unwrap_or_default();
        hdf5_sys::h5p::H5Pclose(fapl);
        (rdwr, trunc, stack)
    });
    assert!(refused.0 < 0 && refused.1 < 0, "{refused:?}");
    assert!(refused.2.contains("read-only"), "{}", refused.2);
    // The file itself is still fine.
    assert!(file.dataset("contiguous").is_ok());
}

#[test]
fn opening_and_walking_all_metadata_costs_few_requests() {
    let server = serve(nwb_file());
    let (file, remote) = open_remote(&server, "/f.nwb");
    let objects = h5files::walk_metadata(&file).unwrap();
    let s = remote.stats();
    let info = h5::driver_info(&file).unwrap();
    eprintln!(
        "open + metadata walk of {objects} objects: {} requests, {} round trips, {} bytes fetched, \
         {} HDF5 read callbacks, {} vector reads (HDF5 {:?})",
        s.requests,
        s.round_trips,
        s.bytes_fetched,
        info.read_calls,
        info.vector_calls,
        h5::library_version()
    );
    assert!(objects > 30, "{objects}");
    assert!(
        info.read_calls > 2 * s.requests,
        "the cache absorbs most reads"
    );
    assert!(s.requests <= 6, "{s:?}");
}

#[test]
fn prefetching_a_hyperslab_makes_reading_it_free() {
    let server = serve(nwb_file());
    let (file, remote) = open_remote(&server, "/f.nwb");
    let ds = file.dataset("acquisition/ElectricalSeries/data").unwrap();
    let rows = 100_000..180_000usize;
    let before = remote.stats();
    let chunks = h5::prefetch_hyperslab(&ds, &[rows.start as u64..rows.end as u64, 0..64]).unwrap();
    let expected = (rows.end - 1) / NWB_CHUNK_ROWS - rows.start / NWB_CHUNK_ROWS + 1;
    assert_eq!(chunks, expected);
    let fetch = remote.stats().since(&before);
    eprintln!("prefetch of {chunks} chunks: {fetch:?}");
    assert!(fetch.round_trips <= 2, "{fetch:?}");
    let before = remote.stats();
    assert_eq!(read_rows(&ds, rows.clone()), expected_rows(rows));
    assert_eq!(
        remote.stats().since(&before).requests,
        0,
        "the read hit the cache"
    );

    assert!(
        h5::prefetch_hyperslab(&ds, std::slice::from_ref(&(0..10))).is_err(),
        "wrong rank"
    );
    assert!(
        h5::prefetch_hyperslab(&ds, &[0..10, 0..65]).is_err(),
        "past the extent"
    );
    let local = h5::File::open(nwb_file()).unwrap();
    let local_ds = local.dataset("acquisition/ElectricalSeries/data").unwrap();
    assert!(
        h5::prefetch_hyperslab(&local_ds, &[0..10, 0..64]).is_err(),
        "not remote"
    );
    let contiguous = file.dataset("units/spike_times").unwrap();
    assert_eq!(
        h5::prefetch_hyperslab(&contiguous, std::slice::from_ref(&(0..100))).unwrap(),
        0
    );
}

#[test]
fn open_url_fetches_the_superblock_and_the_tail_in_one_round() {
    let server = serve(nwb_file());
    // Without the metadata prefetch, whose crawl starts at open and may
    // have a guess under way by now: the open's own requests are counted.
    let file = h5::OpenOptions::new()
        .metadata_prefetch(false)
        .remote(builder().open_tail(h5::OPEN_TAIL))
        .open_url(server.url("/f.nwb"))
        .unwrap();
    let remote = h5::driver_info(&file).unwrap().remote;
    let opened = remote.stats();
    let size = std::fs::metadata(nwb_file()).unwrap().len();
    let asked: Vec<_> = server
        .log()
        .iter()
        .map(|r| r.header("range").unwrap().to_owned())
        .collect();
    assert!(
        asked.contains(&format!("bytes=-{}", h5::OPEN_TAIL)),
        "{asked:?}"
    );
    // The writer put the root group's header at the end: the tail has it.
    assert_eq!((opened.requests, opened.round_trips), (2, 1), "{opened:?}");
    let objects = h5files::walk_metadata(&file).unwrap();
    let walked = remote.stats();
    eprintln!("file of {size} bytes; open: {opened:?}; + walk of {objects} objects: {walked:?}");
    assert!(walked.round_trips <= 2, "{walked:?}");
    assert_eq!(
        describe(&file).unwrap(),
        describe(&h5::File::open(nwb_file()).unwrap()).unwrap()
    );
}

#[test]
fn hdf5_1_14_reads_uncompressed_chunks_with_one_vector_read() {
    let server = serve(nwb_file());
    let remote = builder().open(server.url("/f.nwb")).unwrap();
    // A chunk cache smaller than the 2 MiB chunks: they bypass it, and HDF5
    // 1.14+ hands the driver the whole selection at once.
    let file = h5::OpenOptions::new()
        .chunk_cache(521, 1 << 20, 1.0)
        .open(remote.clone())
        .unwrap();
    let ds = file.dataset("acquisition/ElectricalSeries/data").unwrap();
    let rows = 100_000..180_000usize;
    let (calls0, before) = (h5::driver_info(&file).unwrap(), remote.stats());
    assert_eq!(read_rows(&ds, rows.clone()), expected_rows(rows));
    let (calls, cost) = (
        h5::driver_info(&file).unwrap(),
        remote.stats().since(&before),
    );
    let vector_calls = calls.vector_calls - calls0.vector_calls;
    eprintln!(
        "HDF5 {:?}: {vector_calls} vector reads, {cost:?}",
        h5::library_version()
    );
    if h5::library_version() >= (1, 14, 0) {
        assert_eq!(vector_calls, 1);
        // The chunk index, then every chunk at once.
        assert!(cost.round_trips <= 2, "{cost:?}");
    } else {
        assert_eq!(vector_calls, 0, "no vector reads before 1.14");
    }
}

/// An NWB-like file whose metadata spreads over many 64 KiB blocks: 120
/// processing modules after the data, and a chunk index of a few hundred
/// chunks (its B-tree has nodes between the chunks).
fn spread_file() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| write_spread("nwb-spread.nwb", h5files::Format::Earliest))
}

/// [`spread_file`] in the latest file format: dense groups keep their links
/// in fractal heaps, datasets their chunk addresses in arrays.
fn spread_file_latest() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| write_spread("nwb-spread-latest.nwb", h5files::Format::Latest))
}

fn write_spread(name: &str, format: h5files::Format) -> PathBuf {
    let p = temp_path!(name);
    let shape = h5files::NwbShape {
        rows: 60_000,
        chunk_rows: 128,
        deflate: None,
        extra_groups: 120,
        format,
    };
    h5files::write_nwb(&p, shape).expect("write a spread test file");
    p
}

/// Opens `server`'s file in 64 KiB blocks with a 64 KiB tail, walks its
/// metadata and reads one chunk near the end of its data (through the chunk
/// index; a single read, as HDF5 reads a selection chunk by chunk):
/// the statistics of the walk and of the read, and what the prefetch did.
fn walk_spread(
    server: &RangeServer,
    local: &PathBuf,
    prefetch: bool,
) -> (remfile::Stats, remfile::Stats, h5::PrefetchStats) {
    let file = h5::OpenOptions::new()
        .metadata_prefetch(prefetch)
        .chunk_read_ahead(false)
        .remote(builder().block_size(64 << 10).open_tail(64 << 10))
        .open_url(server.url("/spread.nwb"))
        .unwrap();
    let remote = h5::driver_info(&file).unwrap().remote;
    // The counts after each phase include the guesses it started.
    let settled = || assert!(remote.wait_for_background_fetches(Duration::from_secs(20)));
    h5files::walk_metadata(&file).unwrap();
    settled();
    let walked = remote.stats();
    let ds = file.dataset("acquisition/ElectricalSeries/data").unwrap();
    let rows = 58_880..59_008;
    assert_eq!(read_rows(&ds, rows.clone()), expected_rows(rows));
    settled();
    let read = remote.stats().since(&walked);
    let local = h5::File::open(local).unwrap();
    assert_eq!(describe(&file).unwrap(), describe(&local).unwrap());
    (walked, read, h5::driver_info(&file).unwrap().prefetch)
}

#[test]
fn the_metadata_prefetch_walks_a_file_in_fewer_rounds() {
    let server = serve_far_away(spread_file());
    let (off, off_read, quiet) = walk_spread(&server, spread_file(), false);
    let (on, on_read, did) = walk_spread(&server, spread_file(), true);
    eprintln!("prefetch off: walk {off:?}, read {off_read:?}");
    eprintln!("prefetch on:  walk {on:?}, read {on_read:?}; {did:?}");
    assert_eq!(quiet, h5::PrefetchStats::default(), "off means off");
    // Without the prefetch, each 64 KiB block of metadata costs the walk a
    // request of its own, one after the other.
    assert_eq!((off.requests, off.round_trips), (15, 14), "{off:?}");
    // With it, the crawl runs ahead of HDF5 through the whole graph, the
    // chunk index's nodes among the data too: a few rounds, and the read
    // after the walk finds its chunk index cached (one round fewer).
    assert!(on.round_trips <= 5, "{on:?}");
    assert!(
        on_read.round_trips < off_read.round_trips,
        "{on_read:?} vs {off_read:?}"
    );
    // The superblock's first two reads are the only ones nothing pointed to.
    assert!(
        did.unpredicted_reads <= 2 && did.predicted_reads > 1000,
        "{did:?}"
    );
    assert!(
        did.speculative_bytes <= did.metadata_bytes + (16 << 20),
        "{did:?}"
    );
}

/// The spread file with metadata damaged on purpose: symbol table nodes and
/// B-tree nodes pointing to nonsense (far past the end, or into the data).
fn damaged_copy() -> PathBuf {
    let mut bytes = std::fs::read(spread_file()).unwrap();
    let mut damaged = 0;
    for sig in [&b"SNOD"[..]] {
        let hits: Vec<usize> = bytes
            .windows(4)
            .enumerate()
            .filter(|(_, w)| *w == sig)
            .map(|(i, _)| i)
            .collect();
        // Two nodes in the middle of the file, so the walk gets far first.
        for at in [hits[hits.len() / 3], hits[hits.len() / 2]] {
            for (k, b) in bytes[at + 8..at + 64].iter_mut().enumerate() {
                *b = if k % 3 == 0 { 0xff } else { 0x5a };
            }
            damaged += 1;
        }
    }
    assert_eq!(damaged, 2);
    let path = temp_path!("nwb-spread-damaged.nwb");
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn damaged_metadata_reads_the_same_remotely_and_locally() {
    let path = damaged_copy();
    let server = serve(&path);
    let outcome = |file: &h5::File| -> Result<Vec<String>, String> {
        h5files::walk_metadata(file).map_err(|e| e.to_string())?;
        describe(file).map_err(|e| e.to_string())
    };
    let local = outcome(&h5::File::open(&path).unwrap());
    let file = h5::OpenOptions::new()
        .remote(builder().block_size(64 << 10).open_tail(64 << 10))
        .open_url(server.url("/damaged.nwb"))
        .unwrap();
    let remote = outcome(&file);
    assert!(local.is_err(), "the damage is found");
    assert_eq!(remote, local, "the same data, or the same error");
    let p = h5::driver_info(&file).unwrap().prefetch;
    assert!(p.predicted_reads > 100, "the walk got far: {p:?}");
    assert!(
        p.speculative_bytes <= p.metadata_bytes + (16 << 20),
        "{p:?}"
    );
}

#[test]
fn the_metadata_prefetch_reads_the_latest_format_too() {
    let server = serve_far_away(spread_file_latest());
    let (off, _, _) = walk_spread(&server, spread_file_latest(), false);
    let (on, _, did) = walk_spread(&server, spread_file_latest(), true);
    eprintln!("latest format: prefetch off: {off:?}\n  on: {on:?}; {did:?}");
    // Fractal heaps of links and attributes, version 2 B-trees and chunk
    // arrays are followed too: every read but the superblock's first two
    // was foreseen.
    assert!(
        did.unpredicted_reads <= 2 && did.predicted_reads > 500,
        "{did:?}"
    );
    assert!(on.round_trips <= 4, "{on:?} vs {off:?}");
    assert!(
        did.speculative_bytes <= did.metadata_bytes + (16 << 20),
        "{did:?}"
    );
}

/// Rows and columns of the datasets of [`uneven_file`], and rows per chunk.
const UNEVEN_ROWS: usize = 64 * 1024;
const UNEVEN_COLS: usize = 64;
const UNEVEN_CHUNK: usize = 1024;

/// The value at (row, col) of dataset `which` of [`uneven_file`]: noise whose
/// amplitude changes from chunk to chunk, so that the deflated chunks differ
/// in length.
fn uneven_value(which: usize, row: usize, col: usize) -> i16 {
    let chunk = row / UNEVEN_CHUNK;
    let amplitude = 1 + (chunk * 37 + which * 11) % 200;
    let mut x = (row * UNEVEN_COLS + col) as u64 ^ (which as u64) << 40;
    x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((x >> 33) % amplitude as u64) as i16
}

/// Two deflated datasets, `a` and `b`, written chunk by chunk in turn, so
/// that their chunks alternate in the file: a byte stream through `a`'s
/// chunks runs through `b`'s too.
fn uneven_file() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = temp_path!("uneven.h5");
        let file = h5lib::File::create(&path).unwrap();
        let create = |name| {
            file.new_dataset::<i16>()
                .shape((UNEVEN_ROWS, UNEVEN_COLS))
                .chunk((UNEVEN_CHUNK, UNEVEN_COLS))
                .deflate(4)
                .create(name)
                .unwrap()
        };
        let datasets = [create("a"), create("b")];
        for start in (0..UNEVEN_ROWS).step_by(UNEVEN_CHUNK) {
            for (which, ds) in datasets.iter().enumerate() {
                let rows = start..start + UNEVEN_CHUNK;
                let values: Vec<i16> = rows
                    .clone()
                    .flat_map(|r| (0..UNEVEN_COLS).map(move |c| uneven_value(which, r, c)))
                    .collect();
                let slab =
                    ndarray::Array2::from_shape_vec((UNEVEN_CHUNK, UNEVEN_COLS), values).unwrap();
                ds.write_slice(&slab, (rows, ..)).unwrap();
            }
        }
        path
    })
}

/// The stored bytes of the chunks of `ds` that hold `rows`.
fn stored_bytes(ds: &h5::Dataset, rows: &std::ops::Range<usize>) -> u64 {
    let chunks = rows.start / UNEVEN_CHUNK..(rows.end - 1) / UNEVEN_CHUNK + 1;
    (0..ds.num_chunks().unwrap())
        .filter_map(|i| ds.chunk_info(i))
        .filter(|c| chunks.contains(&(c.offset[0] as usize / UNEVEN_CHUNK)))
        .map(|c| c.size)
        .sum()
}

/// Opens [`uneven_file`] in 4 KiB blocks (so that blocks round little),
/// with the chunk read-ahead on or off, and dataset `name` in it.
fn open_uneven(
    server: &RangeServer,
    chunks: bool,
    name: &str,
) -> (h5::Dataset, remfile::RemoteFile) {
    let file = h5::OpenOptions::new()
        .chunk_read_ahead(chunks)
        .remote(builder().block_size(4 << 10).open_tail(64 << 10))
        .open_url(server.url("/uneven.h5"))
        .unwrap();
    let remote = h5::driver_info(&file).unwrap().remote;
    (file.dataset(name).unwrap(), remote)
}

/// Reads `rows` of `ds` and checks them against what was written.
fn check_rows(ds: &h5::Dataset, which: usize, rows: std::ops::Range<usize>) {
    let got: Vec<i16> = ds
        .read_slice_2d::<i16, _>((rows.clone(), ..))
        .unwrap()
        .into_iter()
        .collect();
    let want: Vec<i16> = rows
        .flat_map(|r| (0..UNEVEN_COLS).map(move |c| uneven_value(which, r, c)))
        .collect();
    assert!(got == want, "rows differ");
}

#[test]
fn a_slice_of_deflated_chunks_reads_ahead_along_the_index() {
    let server = serve(uneven_file());
    let local = h5lib::File::open(uneven_file()).unwrap();
    let rows = 20 * UNEVEN_CHUNK + 300..30 * UNEVEN_CHUNK + 200;
    let stored = stored_bytes(&local.dataset("a").unwrap(), &rows);
    let mut cost = Vec::new();
    for chunks in [false, true] {
        let (ds, remote) = open_uneven(&server, chunks, "a");
        // The first read of the dataset looks its chunk index up.
        check_rows(&ds, 0, 0..1);
        let before = remote.stats();
        check_rows(&ds, 0, rows.clone());
        assert!(remote.wait_for_background_fetches(Duration::from_secs(20)));
        let info = h5::driver_info(&ds.file().unwrap()).unwrap().prefetch;
        cost.push((remote.stats().since(&before), info));
    }
    let [(off, quiet), (on, did)] = [cost[0], cost[1]];
    eprintln!("{stored} bytes stored; off {off:?}; on {on:?}, {did:?}");
    assert_eq!(quiet.chunk_bytes_ahead, 0, "off means off");
    // Eleven chunks, read one by one. Without the chunk read-ahead, each
    // costs HDF5 1.10 a round trip (its writer put the other dataset's
    // chunks between them, so the byte stream's read-ahead never starts);
    // HDF5 2.x writes them together, and the byte stream's read-ahead then
    // fetches eight times their bytes. Along the index: the first
    // chunk, the second with the four after it, then the next eight when
    // the run reaches them (a reader that finds a step still under way
    // waits for it: a round trip at most per step).
    assert_eq!(did.chunk_reads, 11 + 1, "{did:?}");
    if h5::library_version() < (1, 12, 0) {
        assert_eq!(off.round_trips, 11, "{off:?}");
    }
    assert!(on.round_trips <= 4, "{on:?}");
    // The chunks' own bytes (in 4 KiB blocks), and the last step's chunks
    // past the slice's end: at most eight chunks of about a tenth each.
    assert!(
        on.bytes_fetched as f64 <= 1.9 * stored as f64,
        "{on:?}: {stored} stored"
    );
    assert!(
        did.chunk_bytes_ahead <= 12 * stored / 11 + 12 * 4096,
        "{did:?}"
    );
}

#[test]
fn random_chunk_reads_fetch_no_chunk_but_their_own() {
    let server = serve(uneven_file());
    let local = h5lib::File::open(uneven_file()).unwrap();
    let (ds, remote) = open_uneven(&server, true, "b");
    check_rows(&ds, 1, 0..1);
    let before = remote.stats();
    let mut stored = 0;
    for chunk in [40, 7, 51, 23, 29, 3, 60, 33, 12, 45] {
        let rows = chunk * UNEVEN_CHUNK..(chunk + 1) * UNEVEN_CHUNK;
        stored += stored_bytes(&local.dataset("b").unwrap(), &rows);
        check_rows(&ds, 1, rows);
    }
    assert!(remote.wait_for_background_fetches(Duration::from_secs(20)));
    let cost = remote.stats().since(&before);
    let did = h5::driver_info(&ds.file().unwrap()).unwrap().prefetch;
    eprintln!("{stored} bytes stored; {cost:?}; {did:?}");
    assert_eq!(did.chunk_bytes_ahead, 0, "{did:?}");
    // Each chunk's own bytes, in 4 KiB blocks, and the index's nodes.
    assert!(
        cost.bytes_fetched as f64 <= 1.2 * stored as f64 + 64e3,
        "{cost:?}"
    );
}

#[test]
fn read_hyperslab_fetches_exactly_the_selections_chunks_in_one_round() {
    let server = serve(uneven_file());
    let local = h5lib::File::open(uneven_file()).unwrap();
    let rows = 20 * UNEVEN_CHUNK + 300..30 * UNEVEN_CHUNK + 200;
    let stored = stored_bytes(&local.dataset("a").unwrap(), &rows);
    let (ds, remote) = open_uneven(&server, true, "a");
    check_rows(&ds, 0, 0..1);
    let before = remote.stats();
    let slab = [rows.start as u64..rows.end as u64, 0..UNEVEN_COLS as u64];
    let got = h5::read_hyperslab::<i16>(&ds, &slab).unwrap();
    assert_eq!(got.shape(), &[rows.len(), UNEVEN_COLS]);
    let want: Vec<i16> = rows
        .clone()
        .flat_map(|r| (0..UNEVEN_COLS).map(move |c| uneven_value(0, r, c)))
        .collect();
    assert!(got.iter().copied().eq(want), "rows differ");
    assert!(remote.wait_for_background_fetches(Duration::from_secs(20)));
    let cost = remote.stats().since(&before);
    eprintln!("{stored} bytes stored; {cost:?}");
    // The chunks' own bytes, each rounded out to 4 KiB blocks, in one round
    // (the chunk index's leaf is known from the first read).
    assert_eq!(cost.round_trips, 1, "{cost:?}");
    assert!(cost.bytes_fetched <= stored + 11 * 2 * 4096, "{cost:?}");
    let ahead = h5::driver_info(&ds.file().unwrap()).unwrap().prefetch;
    assert_eq!(ahead.chunk_bytes_ahead, 0, "nothing guessed: {ahead:?}");
}

/// The HDF5 builder with the test builder's timeouts and a link that does
/// not depend on timing; a cache of `capacity` bytes for the files to share.
fn many_files_builder(capacity: u64) -> remfile::Builder {
    h5::builder()
        .proxy_from_env(false)
        .link(remfile::Link::Ignored)
        .read_timeout(Duration::from_secs(20))
        .cache(remfile::BlockCache::new(capacity))
}

#[test]
fn files_prefetched_together_open_and_walk_with_no_request() {
    let server = serve(nwb_file()).with_hook(|req, reply| {
        if req.path == "/gone.nwb" {
            Reply::new(404)
        } else {
            reply
        }
    });
    let local = h5::File::open(nwb_file()).unwrap();
    let urls: Vec<String> = ["/a.nwb", "/gone.nwb", "/b.nwb", "/c.nwb"]
        .iter()
        .map(|p| server.url(p))
        .collect();
    let ahead = h5::OpenOptions::new()
        .remote(many_files_builder(256 << 20))
        .prefetch_files(&urls);
    let progress = ahead.wait().unwrap();
    assert_eq!((progress.crawled, progress.failed), (3, 1), "{progress:?}");
    let errors = ahead.errors();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].0, urls[1]);
    assert_eq!(errors[0].1.kind(), remfile::ErrorKind::HttpStatus(404));
    let before = server.requests();
    for url in [&urls[0], &urls[2], &urls[3]] {
        let file = ahead.open(url).unwrap();
        assert_eq!(
            h5files::walk_metadata(&file).unwrap(),
            h5files::walk_metadata(&local).unwrap()
        );
    }
    assert_eq!(server.requests(), before, "opens and walks sent requests");
    // The failed file fails at its own open, with its own error.
    let failed = ahead.open(&urls[1]).unwrap_err();
    assert_eq!(
        failed.remote().map(|e| e.kind()),
        Some(remfile::ErrorKind::HttpStatus(404))
    );
    let progress = ahead.progress();
    assert_eq!((progress.opened, progress.failed), (3, 1), "{progress:?}");
    assert_eq!(ahead.errors().len(), 1);
}

#[test]
fn a_batch_of_files_stays_within_its_bound_until_they_are_opened() {
    let server = serve(nwb_file());
    let local = h5::File::open(nwb_file()).unwrap();
    let fetched_by = |file: &h5::File| {
        let info = h5::driver_info(file).unwrap();
        info.remote.stats().bytes_fetched
    };
    // What one file's open, crawl and walk fetch, alone.
    let one = h5::OpenOptions::new()
        .remote(many_files_builder(256 << 20))
        .prefetch_files([server.url("/alone.nwb")]);
    one.wait().unwrap();
    let file = one.open(server.url("/alone.nwb")).unwrap();
    h5files::walk_metadata(&file).unwrap();
    let per_file = fetched_by(&file);
    drop((file, one));
    // Half of the cache, the batch's bound, holds about three such files.
    let capacity = 7 * per_file;
    let urls: Vec<String> = (0..12).map(|i| server.url(&format!("/{i}.nwb"))).collect();
    let ahead = h5::OpenOptions::new()
        .remote(many_files_builder(capacity))
        .prefetch_files(&urls);
    let progress = ahead.wait().unwrap();
    assert!(progress.waiting_for_opens, "{progress:?}");
    assert!(
        progress.crawled >= 1 && progress.pending > 0,
        "{progress:?}"
    );
    // Half the cache, give or take the files that started before the first
    // said what a file costs: within the cache, so nothing is evicted.
    assert!(progress.bytes_ahead <= capacity, "{progress:?}");
    // Each open gives room back: the batch goes on ahead of the opens, and
    // nothing it fetched is evicted before its file is opened.
    let mut fetched = 0;
    for url in &urls {
        let file = ahead.open(url).unwrap();
        assert_eq!(
            h5files::walk_metadata(&file).unwrap(),
            h5files::walk_metadata(&local).unwrap()
        );
        fetched += fetched_by(&file);
    }
    assert!(
        fetched <= 12 * per_file + per_file / 2,
        "{fetched} bytes for 12 files of {per_file}"
    );
}

/// A batch of three files of `server` opened with `remote`, patient (no
/// timeout ends its waits), once their opens' six requests (a first and a
/// tail each) have `arrived`.
fn prefetch_three_held(
    server: &remfile_testkit::RawServer,
    remote: remfile::Builder,
    arrived: &std::sync::mpsc::Receiver<()>,
) -> (Vec<String>, h5::PrefetchedFiles) {
    let patient = remote
        .idle_timeout(Duration::from_secs(600))
        .read_timeout(Duration::from_secs(600));
    let urls: Vec<String> = (0..3).map(|i| server.url(&format!("/{i}.nwb"))).collect();
    let ahead = h5::OpenOptions::new().remote(patient).prefetch_files(&urls);
    for _ in 0..6 {
        arrived.recv().unwrap();
    }
    (urls, ahead)
}

#[test]
fn cancelling_a_batch_ends_its_requests_and_leaves_its_files_to_their_opens() {
    use remfile_testkit::{After, RawServer, hold_until_hung_up, raw_serve};
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::sync::{Arc, Mutex, mpsc};

    let _dog = remfile_testkit::watchdog(Duration::from_secs(300));
    let data = std::fs::read(nwb_file()).unwrap();
    let holding = Arc::new(AtomicBool::new(true));
    let over = Arc::new(AtomicBool::new(false));
    let (arrived_tx, arrived) = mpsc::channel();
    let (closed_tx, closed) = mpsc::channel();
    let (arrived_tx, closed_tx) = (Mutex::new(arrived_tx), Mutex::new(closed_tx));
    let server = {
        let (holding, over) = (holding.clone(), over.clone());
        RawServer::new(move |req, out| {
            if !holding.load(SeqCst) {
                return raw_serve(&data, req, out);
            }
            let _ = arrived_tx.lock().unwrap().send(());
            if hold_until_hung_up(out, &over) {
                let _ = closed_tx.lock().unwrap().send(());
            }
            After::Close
        })
    };
    // Each open sends its first request and its tail's, and waits: only a
    // cancel can end these opens.
    let (urls, ahead) = prefetch_three_held(&server, many_files_builder(256 << 20), &arrived);
    ahead.cancel();
    for _ in 0..6 {
        closed.recv().unwrap();
    }
    let progress = ahead.wait().unwrap();
    assert_eq!((progress.failed, progress.pending), (3, 0), "{progress:?}");
    for (_, e) in ahead.errors() {
        assert_eq!(e.kind(), remfile::ErrorKind::Interrupted, "{e}");
    }
    // Each file opens afresh at its own open.
    holding.store(false, SeqCst);
    let local = h5::File::open(nwb_file()).unwrap();
    let file = ahead.open(&urls[1]).unwrap();
    assert_eq!(
        h5files::walk_metadata(&file).unwrap(),
        h5files::walk_metadata(&local).unwrap()
    );
    over.store(true, SeqCst);
}

#[test]
fn the_crawls_of_a_batch_on_a_new_line_wait_for_its_first_open() {
    use remfile_testkit::{After, RawServer, hold_until_hung_up, raw_serve};
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::sync::{Arc, Mutex, mpsc};

    let _dog = remfile_testkit::watchdog(Duration::from_secs(300));
    let data = std::fs::read(nwb_file()).unwrap();
    let over = Arc::new(AtomicBool::new(false));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let (arrived_tx, arrived) = mpsc::channel();
    let arrived_tx = Mutex::new(arrived_tx);
    let server = {
        let (over, asked) = (over.clone(), asked.clone());
        RawServer::new(move |req, out| {
            asked.lock().unwrap().push(req.path.clone());
            let _ = arrived_tx.lock().unwrap().send(());
            // The first file's open never ends; the others' are served.
            if req.path == "/0.nwb" {
                hold_until_hung_up(out, &over);
                return After::Close;
            }
            raw_serve(&data, req, out)
        })
    };
    // The link measured (the default): nothing is known of this server's
    // line before the batch's first open has its bodies. Each file's first
    // request and its tail's; the first file's open is held, and the
    // others' crawls wait for it.
    let measured = h5::builder().proxy_from_env(false);
    let (urls, ahead) = prefetch_three_held(&server, measured, &arrived);
    ahead.cancel();
    let progress = ahead.wait().unwrap();
    // The first file's open fails, cancelled; the others' opens may have
    // ended or not by then, but no crawl of theirs started.
    assert_eq!(
        (progress.failed + progress.dropped, progress.pending),
        (3, 0),
        "{progress:?}"
    );
    let asked = asked.lock().unwrap().clone();
    for path in ["/0.nwb", "/1.nwb", "/2.nwb"] {
        let count = asked.iter().filter(|p| p.as_str() == path).count();
        assert_eq!(count, 2, "{path}: only its open's requests");
    }
    let errors = ahead.errors();
    assert!(errors.iter().any(|(url, _)| *url == urls[0]), "{errors:?}");
    for (_, e) in errors {
        assert_eq!(e.kind(), remfile::ErrorKind::Interrupted, "{e}");
    }
    over.store(true, SeqCst);
}

#[test]
fn a_survey_of_immutable_files_on_disk_sends_no_request() {
    let server = serve(nwb_file());
    let local = h5::File::open(nwb_file()).unwrap();
    let dir = temp_path!("survey-on-disk");
    let _ = std::fs::remove_dir_all(&dir);
    let urls: Vec<String> = (0..4).map(|i| server.url(&format!("/{i}.nwb"))).collect();
    let mut requests = Vec::new();
    // The metadata crawl's guesses depend on timing (what HDF5 has read by
    // then): on a loaded machine a cold run's crawl may guess less than a
    // warm one, which reads from disk at once, and the warm one fetches the
    // difference. The runs repeat until one sends nothing (at most three):
    // the disk holds what a survey's crawl fetches, and immutable files are
    // then never asked about again.
    for _run in ["cold", "warm", "warm again"] {
        let before = server.requests();
        let disk = remfile::DiskCache::open(&dir, 1 << 30).unwrap();
        // A cache of its own each run: the warm run finds nothing in memory.
        let remote = many_files_builder(256 << 20)
            .disk_cache(disk.clone())
            .immutable(true);
        let ahead = h5::OpenOptions::new().remote(remote).prefetch_files(&urls);
        for url in &urls {
            let file = ahead.open(url).unwrap();
            assert_eq!(
                h5files::walk_metadata(&file).unwrap(),
                h5files::walk_metadata(&local).unwrap()
            );
            let info = h5::driver_info(&file).unwrap();
            // The crawl's guesses ended (on a loaded machine a close could
            // otherwise cut the cold run's short, and the warm run's crawl
            // guess past what the cold one kept), then the file closes.
            assert!(
                info.remote
                    .wait_for_background_fetches(Duration::from_secs(20))
            );
            drop(file);
        }
        drop(ahead);
        assert!(disk.flush(Duration::from_secs(20)));
        requests.push(server.requests() - before);
        if requests.last() == Some(&0) {
            break;
        }
    }
    assert!(requests[0] >= 4, "{requests:?}");
    let asked: Vec<_> = server.log()[requests[0]..]
        .iter()
        .map(|r| (r.path.clone(), r.range()))
        .collect();
    assert_eq!(
        requests.last(),
        Some(&0),
        "{requests:?}: the warm runs asked for {asked:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file of the latest format laid out as netCDF-4 and logger files are
/// (`h5files::write_appended`): extensible and fixed array chunk indexes, a
/// version 2 B-tree of chunks, whose blocks and nodes lie among the data,
/// and dense groups (fractal heaps, name and creation-order indexes).
fn appended_file() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let p = temp_path!("appended.h5");
        h5files::write_appended(&p, 600).expect("write the appended test file");
        p
    })
}

/// Opens `path` served 100 ms away with `builder`, walks it as users do
/// (every object's info and attributes, every chunk index) and compares it
/// with the local file: what the walk cost, and what the prefetch did.
fn walk_far_away(path: &PathBuf, builder: remfile::Builder) -> (remfile::Stats, h5::PrefetchStats) {
    // Far enough that a busy machine's late thread (the tests run side by
    // side on two cores) still sends its request within the round.
    let server = serve_at_distance(path, Duration::from_millis(100));
    let file = h5::OpenOptions::new()
        .remote(builder)
        .open_url(server.url("/appended.h5"))
        .unwrap();
    let remote = h5::driver_info(&file).unwrap().remote;
    h5files::walk_all_info(&file).unwrap();
    let walked = remote.stats();
    assert!(remote.wait_for_background_fetches(Duration::from_secs(30)));
    let local = h5::File::open(path).unwrap();
    assert_eq!(describe(&file).unwrap(), describe(&local).unwrap());
    (walked, h5::driver_info(&file).unwrap().prefetch)
}

#[test]
fn a_file_of_array_and_btree_chunk_indexes_and_dense_groups_walks_a_round_a_level() {
    let quiet = || h5::builder().proxy_from_env(false);
    // HDF5 2.x writes an extensible array's index block among the data (as
    // every structure it places when it flushes its cache), not with the
    // definitions at the head: index block, super block and data block are
    // then three levels among the data, a round each.
    let deeper = u64::from(h5::library_version().0 >= 2);
    // As opened by default: the crawl follows every index to its last
    // block, page and node, each level in one round.
    let (walked, did) = walk_far_away(appended_file(), quiet().link(remfile::Link::Ignored));
    eprintln!("default: {walked:?}; {did:?}");
    assert!(walked.round_trips <= 3 + deeper, "{walked:?}");
    assert!(did.unpredicted_reads <= 2, "{did:?}");
    // In 64 KiB blocks at 25 MB/s, the half MB of definitions at the head
    // take two rounds, and an extensible array's index block then points to
    // a super block that points to a data block: one round more.
    let slow = remfile::Link::known(Duration::from_millis(30), 25_000_000);
    let small_blocks = quiet().block_size(64 << 10).open_tail(64 << 10);
    let (walked, did) = walk_far_away(appended_file(), small_blocks.link(slow));
    eprintln!("64 KiB blocks, 25 MB/s: {walked:?}; {did:?}");
    assert!(walked.round_trips <= 4 + deeper, "{walked:?}");
    assert!(did.unpredicted_reads <= 2, "{did:?}");
    assert!(
        did.speculative_bytes <= did.metadata_bytes + (16 << 20),
        "{did:?}"
    );
}

#[test]
fn an_open_waits_for_the_batch_opening_its_file_and_takes_it() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::sync::{Mutex, mpsc};

    let _dog = remfile_testkit::watchdog(Duration::from_secs(300));
    let (arrived_tx, arrived) = mpsc::channel();
    let (go_tx, go) = mpsc::channel::<()>();
    let (arrived_tx, go) = (Mutex::new(arrived_tx), Mutex::new(go));
    let first = AtomicBool::new(true);
    // The batch's opening request waits at the server until let go.
    let server = serve(nwb_file()).with_hook(move |req, reply| {
        if req.range().is_some_and(|(at, _)| at == 0) && first.swap(false, SeqCst) {
            let _ = arrived_tx.lock().unwrap().send(());
            let _ = go.lock().unwrap().recv();
        }
        reply
    });
    let url = server.url("/f.nwb");
    let ahead = h5::OpenOptions::new()
        .remote(many_files_builder(256 << 20))
        .prefetch_files([&url]);
    arrived.recv().unwrap();
    let local = h5::File::open(nwb_file()).unwrap();
    std::thread::scope(|s| {
        let opener = s.spawn(|| {
            let file = ahead.open(&url).unwrap();
            h5files::walk_metadata(&file).unwrap()
        });
        go_tx.send(()).unwrap();
        assert_eq!(
            opener.join().unwrap(),
            h5files::walk_metadata(&local).unwrap()
        );
    });
    // One open of the file: the batch's, taken by the open.
    let opening_requests = server
        .log()
        .iter()
        .filter(|r| r.range().is_some_and(|(at, _)| at == 0))
        .count();
    assert_eq!(opening_requests, 1);
    assert_eq!(ahead.progress().opened, 1);
}

/// Reads the root's attributes and those of its members two levels down,
/// as a survey of many files does; the names and attribute names seen.
fn survey_two_levels(file: &h5::File) -> Vec<String> {
    let mut seen = Vec::new();
    let mut note = |name: String, location: &h5lib::Location| {
        let mut attrs = location.attr_names().unwrap();
        attrs.sort();
        seen.push(format!("{name} {attrs:?}"));
    };
    note("/".into(), file);
    for first in file.member_names().unwrap() {
        if let Ok(group) = file.group(&first) {
            note(first.clone(), &group);
            for second in group.member_names().unwrap() {
                let path = format!("{first}/{second}");
                match group.group(&second) {
                    Ok(inner) => note(path, &inner),
                    Err(_) => note(path, &group.dataset(&second).unwrap()),
                }
            }
        } else if let Ok(ds) = file.dataset(&first) {
            note(first, &ds);
        }
    }
    seen
}

/// Surveys the spread file (its top two levels) over `link`, with the
/// driver's defaults: the bytes fetched, the round trips, and the bytes of
/// metadata HDF5 read.
fn survey_spread(link: remfile::Link) -> (u64, u64, u64) {
    let server = serve_far_away(spread_file());
    let file = h5::OpenOptions::new()
        .remote(h5::builder().link(link).proxy_from_env(false))
        .open_url(server.url("/spread.nwb"))
        .unwrap();
    let local = h5::File::open(spread_file()).unwrap();
    assert_eq!(survey_two_levels(&file), survey_two_levels(&local));
    let info = h5::driver_info(&file).unwrap();
    assert!(
        info.remote
            .wait_for_background_fetches(Duration::from_secs(20))
    );
    let stats = info.remote.stats();
    let read = h5::driver_info(&file).unwrap().prefetch.metadata_bytes;
    (server.body_bytes(), stats.round_trips, read)
}

/// The bytes of metadata HDF5 reads walking the whole spread file (every
/// object's info and attributes, every chunk index).
fn spread_walk_reads() -> u64 {
    let server = serve_far_away(spread_file());
    let file = h5::OpenOptions::new()
        .remote(
            h5::builder()
                .link(remfile::Link::Ignored)
                .proxy_from_env(false),
        )
        .open_url(server.url("/spread.nwb"))
        .unwrap();
    h5files::walk_all_info(&file).unwrap();
    h5::driver_info(&file).unwrap().prefetch.metadata_bytes
}

#[test]
fn on_a_line_whose_bytes_are_dear_a_survey_fetches_a_few_times_what_it_reads() {
    let ms = Duration::from_millis;
    let (dear, dear_rounds, read) = survey_spread(remfile::Link::shared_line(ms(30), 12_500_000));
    let (cheap, cheap_rounds, _) = survey_spread(remfile::Link::shared_line(ms(30), 500_000_000));
    let walk = spread_walk_reads();
    eprintln!(
        "HDF5 read {read} bytes ({walk} in a whole walk); a dear line fetched {dear} in \
         {dear_rounds} rounds, a cheap one {cheap} in {cheap_rounds}"
    );
    // Where bytes are cheap the crawl buys the whole graph and the open's
    // whole tail (24 times what HDF5 reads here); where they are dear it
    // stays two rounds' worth ahead of HDF5, the tail is one round's, and
    // a file opened alone takes the deeper levels and gaps half a round
    // pays for (1.8-2.2 MB, as the reads' timing has it): a few times what
    // a whole walk reads, and less than where bytes are cheap.
    assert!(
        dear <= 5 * walk,
        "{dear} bytes fetched; a walk reads {walk}"
    );
    assert!(dear * 3 <= cheap * 2, "{dear} vs {cheap}");
    assert!(
        dear_rounds <= cheap_rounds + 2,
        "{dear_rounds} vs {cheap_rounds}"
    );
}

#[test]
fn a_file_object_crawl_starts_at_open_for_hdf5_files_only() {
    use remfile::hdf5::driver::FileObjectCrawl;
    let server = serve(spread_file());
    let remote = h5::builder()
        .proxy_from_env(false)
        .open(server.url("/spread.nwb"))
        .unwrap();
    let crawl = FileObjectCrawl::start_if_hdf5(&remote).expect("an HDF5 file");
    assert!(remote.wait_for_background_fetches(Duration::from_secs(20)));
    assert!(crawl.stats().targets > 100, "{:?}", crawl.stats());
    // Read as HDF5 reads: its metadata is all here, no request of its own.
    let before = server.log().len();
    let mut superblock = [0u8; 96];
    crawl.read_exact_at(0, &mut superblock).unwrap();
    let file = h5::open(remote.clone()).unwrap();
    let local = h5::File::open(spread_file()).unwrap();
    assert_eq!(survey_two_levels(&file), survey_two_levels(&local));
    assert_eq!(server.log().len(), before, "{:?}", &server.log()[before..]);
    drop(crawl);
    // Anything else starts none.
    let other = RangeServer::new(vec![7u8; 1 << 20]);
    let blob = builder().open(other.url("/blob")).unwrap();
    assert!(FileObjectCrawl::start_if_hdf5(&blob).is_none());
}

/// `explain_file` lists the requests the server saw, in the rounds the
/// server saw them, and credits HDF5's reads to the rounds that brought
/// them; a file opened without the trace has none.
#[test]
fn an_explained_walk_lists_the_servers_requests_and_what_each_round_brought() {
    let server = serve_at_distance(rich_file(), Duration::from_millis(40));
    let untraced = h5::OpenOptions::new()
        .remote(builder())
        .open_url(server.url("/rich.h5"))
        .unwrap();
    assert!(h5::explain_file(&untraced).is_none());
    drop(untraced);
    let before = server.requests();
    let file = h5::OpenOptions::new()
        .remote(builder())
        .trace(true)
        .open_url(server.url("/plain.h5"))
        .unwrap();
    h5files::walk_all_info(&file).unwrap();
    let e = h5::explain_file(&file).unwrap();
    let listed: usize = e.rounds.iter().map(|r| r.requests.len()).sum();
    // This file's requests (the other file's read-ahead may still land).
    let seen = server.log()[before..]
        .iter()
        .filter(|r| r.path == "/plain.h5")
        .count();
    assert_eq!(listed, seen);
    let first = &e.rounds[0].brought;
    assert!(
        first.contains_key(&h5::explain::Structure::Superblock)
            && first.contains_key(&h5::explain::Structure::ObjectHeader),
        "{e}"
    );
    let credited: u64 = e
        .rounds
        .iter()
        .flat_map(|r| r.brought.values())
        .map(|t| t.0)
        .sum();
    let not_fetched: u64 = e.not_fetched.values().map(|t| t.0).sum();
    let reads = h5::driver_info(&file).unwrap().read_calls;
    assert_eq!(credited + not_fetched, reads, "every read of HDF5's, once");
    assert!(e.metadata_read > 0 && e.metadata_rounds >= 1 && e.metadata_rounds <= e.rounds.len());
    let text = e.to_string();
    assert!(
        text.contains("round   1") && text.contains("total"),
        "{text}"
    );
}
