//! Many files in one process: connections, threads and background work
//! shared across files and bounded however many are open.

use std::sync::Mutex;
use std::time::Duration;

use remfile::process;
use remfile_testkit::{RangeServer, builder, test_data};

/// Tests here count the process's threads: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Threads of this process that are not a test server's.
#[cfg(target_os = "linux")]
fn crate_and_test_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("the process's threads")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() != remfile_testkit::SERVER_THREAD)
        .count()
}

/// Samples [`crate_and_test_threads`] until dropped; the most seen.
#[cfg(target_os = "linux")]
struct ThreadPeak {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sampler: Option<std::thread::JoinHandle<usize>>,
}

#[cfg(target_os = "linux")]
impl ThreadPeak {
    fn start() -> ThreadPeak {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let theirs = stop.clone();
        let sampler = std::thread::spawn(move || {
            let mut peak = 0;
            remfile_testkit::time::wait_for(Duration::MAX, || {
                peak = peak.max(crate_and_test_threads());
                theirs.load(Ordering::SeqCst)
            });
            peak
        });
        ThreadPeak {
            stop,
            sampler: Some(sampler),
        }
    }

    fn peak(mut self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.sampler.take().unwrap().join().unwrap()
    }
}

#[test]
fn a_second_file_on_the_same_origin_opens_on_a_pooled_connection() {
    let _serial = serial();
    let data = test_data(4 << 20, 29);
    let server = RangeServer::new(data.clone());
    let first = builder().open(server.url("/first.bin")).unwrap();
    let mut buf = vec![0; 1000];
    first.read_exact_at(2 << 20, &mut buf).unwrap();
    assert_eq!(buf, data[2 << 20..(2 << 20) + 1000]);
    assert_eq!(server.connections(), 1, "one file, one connection");
    // Another file, its own options: the same agent and pool.
    let second = builder()
        .block_size(64 << 10)
        .max_connections(2)
        .open(server.url("/second.bin"))
        .unwrap();
    second.read_exact_at(3 << 20, &mut buf).unwrap();
    assert_eq!(buf, data[3 << 20..(3 << 20) + 1000]);
    assert_eq!(server.requests(), 4);
    assert_eq!(
        server.connections(),
        1,
        "the second file opened and read on the first's connection"
    );
}

/// A hundred files open at once, read by eight threads in sequential
/// streams (each read starting read-ahead in the background) on a link 5 ms
/// away: threads and requests in flight stay under the process's bounds,
/// however many files there are.
#[cfg(target_os = "linux")]
#[test]
fn a_hundred_open_files_stay_within_the_process_bounds() {
    let _serial = serial();
    const FILES: usize = 100;
    const READERS: usize = 8;
    let data = test_data(8 << 20, 31);
    let server = RangeServer::new(data.clone()).with_hook(|_, reply| {
        remfile_testkit::time::late(Duration::from_millis(5));
        reply
    });
    let before = crate_and_test_threads();
    let peak = ThreadPeak::start();
    let files: Vec<_> = (0..FILES)
        .map(|i| {
            builder()
                .block_size(256 << 10)
                .read_ahead_min(1 << 20)
                .open(server.url(&format!("/file-{i}.bin")))
                .unwrap()
        })
        .collect();
    std::thread::scope(|s| {
        for reader in 0..READERS {
            let (files, data) = (&files, &data);
            s.spawn(move || {
                let mut buf = vec![0; 512 << 10];
                for step in 0..8u64 {
                    for (i, file) in files.iter().enumerate().skip(reader).step_by(READERS) {
                        let at = step * (512 << 10) + i as u64 * 4096;
                        file.read_exact_at(at, &mut buf).unwrap();
                        assert_eq!(buf, data[at as usize..at as usize + buf.len()], "file {i}");
                    }
                }
            });
        }
    });
    for file in &files {
        assert!(file.wait_for_background_fetches(Duration::from_secs(60)));
    }
    let peak = peak.peak();
    let fetched: u64 = files.iter().map(|f| f.stats().bytes_fetched).sum();
    let read: u64 = files.iter().map(|f| f.stats().bytes_read).sum();
    eprintln!(
        "{FILES} files: threads {before} -> peak {peak}; {} requests, {} connections, \
         at most {} open and {} answered at once",
        server.requests(),
        server.connections(),
        server.peak_open_connections(),
        server.peak_requests_at_once()
    );
    assert!(
        fetched > read,
        "read-ahead ran: {fetched} bytes fetched, {read} read"
    );
    // The readers and the sampler are this test's own.
    let bound = READERS + 1 + process::BACKGROUND_WORKERS + process::FETCH_THREADS;
    assert!(
        peak <= before + bound,
        "{peak} threads at once with {before} before: more than {bound} more"
    );
    assert!(
        server.peak_requests_at_once() <= process::CONNECTIONS_PER_ORIGIN,
        "{} requests in flight at once",
        server.peak_requests_at_once()
    );
    assert!(
        server.connections() <= 2 * process::CONNECTIONS_PER_ORIGIN,
        "{} connections for {FILES} files: not reused",
        server.connections()
    );
}

#[cfg(feature = "hdf5")]
use remfile_testkit::h5files;

/// An NWB-like file whose metadata spreads over the file: its crawl takes
/// several waves.
#[cfg(feature = "hdf5")]
fn spread_file() -> &'static std::path::PathBuf {
    static PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let p = h5files::temp_path!("many-files-spread.nwb");
        let shape = h5files::NwbShape {
            rows: 60_000,
            chunk_rows: 128,
            deflate: None,
            extra_groups: 120,
            format: h5files::Format::Earliest,
        };
        h5files::write_nwb(&p, shape).expect("write a spread test file");
        p
    })
}

/// Groups nested ten deep, each after a megabyte of data of the one
/// above: the crawl learns of a level only from the one above it, a wave
/// per level.
#[cfg(feature = "hdf5")]
fn deep_file() -> &'static std::path::PathBuf {
    static PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        use remfile::hdf5::hdf5_metno as h5lib;
        let p = h5files::temp_path!("many-files-deep.h5");
        let file = h5lib::File::create(&p).unwrap();
        let mut group = file.group("/").unwrap();
        for level in 0..10u8 {
            group = group.create_group(&format!("level{level}")).unwrap();
            group
                .new_dataset::<u8>()
                .shape(1 << 20)
                .create("data")
                .unwrap()
                .write(&vec![level; 1 << 20])
                .unwrap();
        }
        drop(group);
        file.close().unwrap();
        p
    })
}

#[cfg(feature = "hdf5")]
fn open_remote_h5(server: &RangeServer, path: &str) -> remfile::hdf5::File {
    remfile::hdf5::OpenOptions::new()
        .remote(builder().block_size(64 << 10).open_tail(64 << 10))
        .open_url(server.url(path))
        .unwrap()
}

/// A hundred HDF5 files open at once, each crawling its metadata: the
/// crawls share the background workers (no thread per file), and every
/// file reads as the local one.
#[cfg(all(feature = "hdf5", target_os = "linux"))]
#[test]
fn a_hundred_open_hdf5_files_crawl_on_the_shared_workers() {
    let _serial = serial();
    const FILES: usize = 100;
    let server = RangeServer::new(std::fs::read(spread_file()).unwrap());
    let local = remfile::hdf5::File::open(spread_file()).unwrap();
    let expected = h5files::describe(&local).unwrap();
    let before = crate_and_test_threads();
    let peak = ThreadPeak::start();
    let files: Vec<_> = (0..FILES)
        .map(|i| open_remote_h5(&server, &format!("/session-{i}.nwb")))
        .collect();
    for file in &files {
        let remote = remfile::hdf5::driver_info(file).unwrap().remote;
        assert!(remote.wait_for_background_fetches(Duration::from_secs(60)));
    }
    let crawled: u64 = files
        .iter()
        .map(|f| {
            remfile::hdf5::driver_info(f)
                .unwrap()
                .prefetch
                .predicted_reads
        })
        .sum();
    let all_open = crate_and_test_threads();
    for file in &files {
        assert_eq!(h5files::describe(file).unwrap(), expected);
    }
    let peak = peak.peak();
    eprintln!(
        "{FILES} HDF5 files: threads {before} -> peak {peak}, {all_open} with all open and crawled; \
         {} requests, {} connections, at most {} answered at once",
        server.requests(),
        server.connections(),
        server.peak_requests_at_once()
    );
    assert!(crawled > 0, "the crawls ran");
    let bound = 1 + process::BACKGROUND_WORKERS + process::FETCH_THREADS;
    assert!(
        peak <= before + bound,
        "{peak} threads at once with {before} before: more than {bound} more"
    );
    // Once crawled, the files hold no thread of their own.
    assert!(
        all_open <= before + 1 + process::BACKGROUND_WORKERS,
        "{all_open} threads with {FILES} files open, {before} before"
    );
    assert!(server.peak_requests_at_once() <= process::CONNECTIONS_PER_ORIGIN);
}

/// Closing a file while its crawl runs ends the crawl: no request for the
/// file after the close, though the crawl had more to fetch.
#[cfg(feature = "hdf5")]
#[test]
fn closing_a_file_mid_crawl_ends_its_background_work() {
    let _serial = serial();
    // Far enough away that the crawl, a wave per level, is still running
    // when the file closes.
    let server = RangeServer::new(std::fs::read(deep_file()).unwrap()).with_hook(|_, reply| {
        remfile_testkit::time::late(Duration::from_millis(50));
        reply
    });
    let asked_for = |path: &str| server.log().iter().filter(|r| r.path == path).count();
    let (closed, remote) = {
        let file = open_remote_h5(&server, "/closed.h5");
        let remote = remfile::hdf5::driver_info(&file).unwrap().remote;
        drop(file);
        // Requests in flight at the close are answered (or let go of).
        assert!(remote.wait_for_background_fetches(Duration::from_secs(60)));
        (remote.stats().requests, remote)
    };
    // A whole crawl of the same file, a wave per level from the same
    // server: a crawl the close did not end would ask meanwhile.
    let whole = {
        let file = open_remote_h5(&server, "/whole.h5");
        let remote = remfile::hdf5::driver_info(&file).unwrap().remote;
        assert!(remote.wait_for_background_fetches(Duration::from_secs(60)));
        remote.stats().requests
    };
    assert_eq!(remote.stats().requests, closed, "a request after the close");
    // The server sees no more than the file sent before the close (one sent
    // then may reach it later, queued behind a slow answer on its
    // connection).
    let seen = asked_for("/closed.h5");
    assert!(
        seen as u64 <= closed,
        "{seen} requests seen, {closed} sent before the close"
    );
    eprintln!("crawl: {whole} requests left to run, {closed} when closed early");
    assert!(
        closed < whole,
        "the crawl ended early: {closed} requests closed, {whole} whole"
    );
}

/// A read never waits for background work's turn: with every background
/// worker busy (guesses on files whose server stalls), a guess queued for
/// another file leaves the read of its block to fetch the block itself.
#[test]
fn a_read_does_not_wait_for_a_guess_still_queued() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let _serial = serial();
    let data = test_data(4 << 20, 32);
    let stalled_answered = Arc::new(AtomicUsize::new(0));
    let answered = stalled_answered.clone();
    let server = RangeServer::new(data.clone()).with_hook(move |req, reply| {
        let opening = req.range().is_some_and(|(first, _)| first == 0);
        if req.path.starts_with("/stalled") && !opening {
            remfile_testkit::time::late(Duration::from_secs(3));
            answered.fetch_add(1, Ordering::SeqCst);
        }
        reply
    });
    let stalled: Vec<_> = (0..process::BACKGROUND_WORKERS * 2)
        .map(|i| {
            builder()
                .block_size(64 << 10)
                .open(server.url(&format!("/stalled-{i}")))
                .unwrap()
        })
        .collect();
    for file in &stalled {
        assert!(
            file.prefetch_in_background(std::iter::once(1 << 20..(1 << 20) + 100), 1 << 20) > 0
        );
    }
    let file = builder()
        .block_size(64 << 10)
        .open(server.url("/fine"))
        .unwrap();
    assert!(file.prefetch_in_background(std::iter::once(2 << 20..(2 << 20) + 100), 1 << 20) > 0);
    let mut buf = vec![0; 100];
    file.read_exact_at(2 << 20, &mut buf).unwrap();
    assert_eq!(buf, data[2 << 20..(2 << 20) + 100]);
    assert_eq!(
        stalled_answered.load(Ordering::SeqCst),
        0,
        "the read waited for the background workers to be free"
    );
    for file in &stalled {
        assert!(file.wait_for_background_fetches(Duration::from_secs(60)));
    }
}

/// Closing one HDF5 handle on a remote file stops that handle's
/// background work only: the remote file's own guesses still fetch.
#[cfg(feature = "hdf5")]
#[test]
fn closing_an_hdf5_file_leaves_other_handles_on_its_remote_file_their_background_work() {
    let _serial = serial();
    let server = RangeServer::new(std::fs::read(deep_file()).unwrap());
    let remote = builder()
        .block_size(64 << 10)
        .open(server.url("/shared.h5"))
        .unwrap();
    let file = remfile::hdf5::open(remote.clone()).unwrap();
    assert!(remote.wait_for_background_fetches(Duration::from_secs(60)));
    drop(file);
    let before = remote.stats().requests;
    // A range the crawl left uncached (which one depends on the HDF5
    // version's reads): its guess is queued.
    let end = remote.len();
    let guess = (1..end / 100_000)
        .map(|k| end - (k + 1) * 100_000..end - k * 100_000)
        .find(|range| remote.prefetch_in_background(std::iter::once(range.clone()), 1 << 20) > 0)
        .expect("a range the crawl did not fetch");
    assert!(remote.wait_for_background_fetches(Duration::from_secs(60)));
    let guessed = remote.stats().requests;
    assert!(guessed > before, "the guess fetched nothing");
    let mut buf = vec![0; 1000];
    remote
        .read_exact_at(guess.start + 50_000, &mut buf)
        .unwrap();
    assert_eq!(
        remote.stats().requests,
        guessed,
        "the guess's block was cached"
    );
}
