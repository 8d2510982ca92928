//! The disk cache when a process ends without dropping its files: what it
//! fetched is on disk for the next run, and no other process waits on the
//! locks it held. Each test runs its readers as child processes (this test
//! binary again, told by an environment variable to act as one) that end
//! with `std::process::exit`, as many programs end: no destructor runs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use remfile::{DiskCache, RemoteFile};
use remfile_testkit::{RangeServer, TempDir, builder, test_data};

/// The block size of the 8-process test; the scattered reads use the
/// default (1 MiB), as a program that sets nothing does.
const BLOCK: u64 = 64 * 1024;

/// The environment variable that makes this binary a child: what it reads,
/// as `role|url|dir|seed`.
const CHILD: &str = "REMFILE_DISK_EXIT_CHILD";

/// Forty ranges of 1 MiB spread over a file of `len` bytes, at offsets
/// that are not block boundaries.
fn scattered(len: u64) -> Vec<(u64, usize)> {
    const RANGE: u64 = 1 << 20;
    let step = len / 40;
    (0..40)
        .map(|i| (i * step + (i * 7919) % (step - RANGE), RANGE as usize))
        .collect()
}

fn open(url: &str, dir: &Path, block: Option<u64>) -> RemoteFile {
    let b = builder();
    let b = match block {
        Some(size) => b.block_size(size),
        None => b,
    };
    b.disk_cache(DiskCache::open(dir, 256 << 20).unwrap())
        .open(url)
        .unwrap()
}

fn read(file: &RemoteFile, pos: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len];
    file.read_exact_at(pos, &mut buf).unwrap();
    buf
}

/// What a child does, then `std::process::exit(0)` with its file still
/// open: `scattered` reads forty ranges (from eight threads at once, as a
/// program that reads in parallel does), `whole` reads the whole file.
fn child(spec: &str) -> ! {
    let mut parts = spec.split('|');
    let (role, url, dir, seed) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap().parse().unwrap(),
    );
    let scatter = role == "scattered";
    let file = open(url, Path::new(dir), (!scatter).then_some(BLOCK));
    let data = test_data(file.len() as usize, seed);
    let ranges = match scatter {
        true => scattered(file.len()),
        false => vec![(0, data.len())],
    };
    let right = std::thread::scope(|s| {
        let readers: Vec<_> = ranges
            .chunks(5)
            .map(|some| {
                let (file, data) = (&file, &data);
                s.spawn(move || {
                    some.iter().all(|&(pos, len)| {
                        read(file, pos, len) == data[pos as usize..pos as usize + len]
                    })
                })
            })
            .collect();
        readers.into_iter().all(|r| r.join().unwrap())
    });
    std::process::exit(if right { 0 } else { 3 });
}

/// Starts a child of `role` reading `url` (served from test data `seed`)
/// through `dir`.
fn spawn(role: &str, url: &str, dir: &Path, seed: u64) -> Child {
    let test = if role == "scattered" {
        "a_run_that_exits_after_reading_leaves_a_warm_open_of_one_request"
    } else {
        "eight_processes_that_exit_after_reading_fetch_a_file_about_once"
    };
    Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture"])
        .env(CHILD, format!("{role}|{url}|{}|{seed}", dir.display()))
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// Every lock file under `dir`.
fn locks(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().is_dir() {
            out.extend(locks(&e.path()));
        } else if e.path().extension().is_some_and(|x| x == "lock") {
            out.push(e.path());
        }
    }
    out
}

#[test]
fn a_run_that_exits_after_reading_leaves_a_warm_open_of_one_request() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec);
    }
    let data = test_data(64 << 20, 91);
    let server = RangeServer::new(data.clone());
    // Whether the last blocks of a run reach the disk before it ends is a
    // race without a flush at exit (lost in most runs): three runs.
    for round in 0..3 {
        let dir = TempDir::new(&format!("exit-warm-{round}"));
        let mut first = spawn("scattered", &server.url("/f"), &dir, 91);
        assert!(first.wait().unwrap().success(), "the first run failed");
        let before = server.requests();
        let warm = open(&server.url("/f"), &dir, None);
        for (pos, len) in scattered(data.len() as u64) {
            let at = pos as usize;
            assert!(read(&warm, pos, len) == data[at..at + len], "at {pos}");
        }
        let requests = server.requests() - before;
        eprintln!("round {round}: a warm run after one that exited: {requests} requests");
        assert_eq!(
            requests,
            1,
            "the warm open's request only: {:?}",
            warm.stats()
        );
        assert!(locks(&dir).is_empty(), "locks left: {:?}", locks(&dir));
    }
}

#[test]
fn eight_processes_that_exit_after_reading_fetch_a_file_about_once() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec);
    }
    const PROCESSES: usize = 8;
    let data = test_data(64 << 20, 92);
    let server = RangeServer::new(data.clone());
    let dir = TempDir::new("exit-eight");
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| spawn("whole", &server.url("/f"), &dir, 92))
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a reader failed");
    }
    // Bytes served with a body: a warm open's conditional request (a 304)
    // brings none.
    let fetched: u64 = server
        .log()
        .iter()
        .filter(|r| r.header("if-none-match").is_none())
        .filter_map(|r| r.range())
        .map(|(first, last)| last.saturating_sub(first) + 1)
        .sum();
    let ratio = fetched as f64 / data.len() as f64;
    if std::env::var("DEBUG_DUMP").is_ok() {
        for r in server.log() {
            eprintln!(
                "{} conn {} {:?} {:?}",
                r.n,
                r.conn,
                r.range(),
                r.header("if-none-match")
            );
        }
    }
    eprintln!(
        "{PROCESSES} processes that exit fetched {fetched} bytes of a {} byte file ({ratio:.3}x)",
        data.len()
    );
    assert!(ratio <= 1.05, "{fetched} bytes for {}", data.len());
    assert!(locks(&dir).is_empty(), "locks left: {:?}", locks(&dir));
}
