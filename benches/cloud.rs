//! Remote HDF5/NWB reading against a server that behaves like the cloud.
//!
//! ```text
//! cargo bench --features hdf5 --bench cloud
//! ```
//!
//! Reads files real writers made: NWB files written by pynwb
//! (`benches/write_nwb.py`, once, under `target/bench-data`, in the Python
//! environment of `benches/setup-peers.sh`) of 806 MB — an int16
//! `ElectricalSeries/data` of 6,300,000 × 64 in 2 MiB chunks, an electrodes
//! table, units, trials and processing modules, 130 groups, 216 datasets and
//! 1,100 attributes — plain, gzip, and the plain one rewritten in the latest
//! file format by `h5repack -L`; and the crate's own generated NWB-like file
//! of 256 MB (2,000,000 rows, the object headers written after the bulk
//! data) with its gzip variant. For the metadata walk it also shows the same
//! open and walk without the metadata prefetch. Serves each file from a separate
//! process (so the CPU time below is the reader's alone) with a delay per
//! request, an extra delay per new connection and, in some rows, a cap of
//! 25 MB/s per connection. For each phase it prints wall time, requests,
//! round trips, bytes fetched, the over-fetch ratio and CPU time, beside the
//! floor: for the bulk read, one request of exactly the stored bytes.
//!
//! The remfile phases and the floor run three times
//! (`REMFILE_BENCH_REPEAT`); each row is the run of median wall time.
//! `REMFILE_BENCH_LOG=1` prints the server's log of each phase's requests
//! (connection, range, bytes, arrival and end times); `REMFILE_BENCH_SHAPE`
//! runs only the survey's server shape of that label (e.g. `"30 ms, 12.5
//! MB/s shared"`); `REMFILE_BENCH_ONLY`
//! runs only the rows whose label contains it (e.g. `"30 ms, pynwb"`),
//! `REMFILE_BENCH_BLOCK` sets remfile's block size in bytes, and
//! `REMFILE_BENCH_PEERS=0` skips the other readers, `REMFILE_BENCH_ROS3=0`
//! only ros3 (whose walk takes minutes).
//!
//! ```text
//! cargo bench --features hdf5 --bench cloud -- corpus
//! ```
//!
//! runs the corpus instead: files of a few hundred MB from nine writers
//! (`benches/corpus.py`, written once under `target/bench-data/corpus`), and
//! nwb_deep rewritten in the latest format by `h5repack -L` (and the files
//! `REMFILE_BENCH_CORPUS_EXTRA` names, paths separated by `:`), each
//! with the workloads users run — the walk asking for every object's info
//! and every attribute, then a slice of the largest chunked dataset, and for
//! NWB files pynwb's `read()` — through the Rust adapter, the plugin in h5py,
//! Python remfile, fsspec's block cache and the local disk. Rounds come from
//! the server's log: requests sent before any answer of the current round
//! came back belong to it.
//!
//! ```text
//! cargo bench --features hdf5 --bench cloud -- survey
//! ```
//!
//! runs the survey of a dataset (`benches/survey.py`): many files served by
//! one server process, opened in one Python process after the other, the
//! root's attributes and its members' two levels down read, closed. Two
//! tables (`REMFILE_BENCH_SURVEY_SET`: `corpus`, `36`, or `all`, the
//! default):
//!
//! - the corpus: every file of it, one per writer, written small under
//!   `target/bench-data/survey`; at 30 ms per request and per new
//!   connection, then with 25 MB/s per connection too;
//! - 36 files: six kinds (`nwb_deep.nwb`, `nwb_ophys.nwb`,
//!   `nwb_icephys.nwb`, `netcdf4.nc`, `anndata.h5ad`,
//!   `h5py_track_order_v110.h5`) under six names each (`nwb_deep-1.nwb` …,
//!   hard links to the corpus's files in `target/bench-data/survey36-SIZE`;
//!   the server keeps one copy of each in memory); at 30 ms per request and
//!   per new connection with no cap, then with 12.5 MB/s and 125 MB/s
//!   shared by all connections (one link whose bytes the connections take
//!   in turn).
//!
//! The readers: `local` (h5py on the local copies), `local-count` (h5py on
//! a Python file object over the local copies that records every read),
//! `wheel` (the package's `driver="remfile"`), `wheel-prefetch` (the same
//! after `remfile_hdf5.prefetch_files` of every file), `wheel-fileobj` (its
//! `RemoteFile` under h5py), `fsspec` (one HTTP filesystem, 1 MiB block
//! cache) and `remfile-py` (Python remfile); each `REMFILE_BENCH_REPEAT`
//! times (2 by default), each run in a fresh process and a row of its own.
//! Before a table, `local-count` measures what HDF5 itself reads of the
//! files: the size of the union of the byte ranges it read, in all and by
//! kind. The columns: `files`; `wall ms` and `cpu ms`, of the reader's
//! process over all files; `reqs`, `rounds` and `conns`, the requests, round
//! trips (requests sent before any answer of the round came back belong to
//! it) and new connections the server saw; `MB`, the bytes the server sent
//! (a body cut short counts what was written before the reader hung up);
//! `/hdf5`, `MB` over the bytes HDF5 reads of the local copies; `x fsspec`,
//! the wall time over fsspec's fastest run on the same server; and a digest
//! of the values read, which every reader must share (` (differs)` marks
//! one that does not). Under each server's rows, each remote reader's first
//! run by kind of file: MB fetched, requests, and the ratio to HDF5's bytes
//! of that kind.
//!
//! `REMFILE_BENCH_PYTHON` names the interpreter (for the corpus too; by
//! default the one in `target/peers-venv`); the data and environments live
//! in Cargo's target directory (`CARGO_TARGET_DIR` if set).
//! `REMFILE_BENCH_SURVEY=full` surveys the corpus's full-size files instead
//! (those of `-- corpus`, a few hundred MB each), where one file's metadata
//! is spread over hundreds of MB; `REMFILE_BENCH_READERS` (comma-separated)
//! runs only the readers it names; `REMFILE_BENCH_LOG=1` prints the server's
//! log (each request's connection, range, bytes, times and path) after each
//! server's rows. For example:
//!
//! ```text
//! REMFILE_BENCH_SURVEY_SET=36 REMFILE_BENCH_READERS=local-count,wheel,fsspec \
//!     cargo bench --features hdf5 --bench cloud -- survey
//! ```

mod support;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use remfile::hdf5 as h5;
use remfile::{RemoteFile, Stats};
use remfile_testkit::cpu::{children_cpu_time, cpu_time};
use remfile_testkit::h5files::{self, NWB_CHUNK_ROWS, NwbShape};
use remfile_testkit::{plugin_build, python};
use support::cloud_server::{CloudServer, Shape};

const ROWS: usize = 2_000_000;
const MIB: u64 = 1 << 20;
const SLICE: std::ops::Range<usize> = 1_000_000..1_180_000;
const CHANNEL_ROWS: std::ops::Range<usize> = 1_000_000..2_000_000;

fn main() {
    if let Ok(spec) = std::env::var("REMFILE_BENCH_SERVE") {
        return serve(&spec);
    }
    if std::env::args().any(|a| a == "corpus") {
        return corpus();
    }
    if std::env::args().any(|a| a == "survey") {
        return survey();
    }
    let (major, minor, patch) = h5::library_version();
    println!("HDF5 {major}.{minor}.{patch}");
    // Files real writers made first: docs/benchmarks.md's table is on the pynwb one.
    let mut files: Vec<(&str, PathBuf)> = Vec::new();
    if let Some(plain) = pynwb_file("pynwb-plain.nwb", None) {
        if let Some(latest) = latest_format(&plain, "pynwb-latest.nwb") {
            files.push(("pynwb, latest", latest));
        }
        files.insert(0, ("pynwb", plain));
    }
    if let Some(gzip) = pynwb_file("pynwb-gzip.nwb", Some(4)) {
        files.push(("pynwb, gzip", gzip));
    }
    files.push(("generated", data_file("nwb-plain.nwb", None)));
    files.push(("generated, gzip", data_file("nwb-gzip.nwb", Some(4))));
    println!(
        "{:<32} {:<16} {:>8} {:>5} {:>6} {:>7} {:>5} {:>7} {:>5}",
        "server, file", "phase", "wall ms", "reqs", "rounds", "MB", "over", "cpu ms", "conns"
    );
    for (label, delay_ms, cap) in [
        ("0 ms", 0, None),
        ("30 ms", 30, None),
        ("30 ms, 25 MB/s per conn", 30, Some(25e6)),
    ] {
        for (name, file) in &files {
            let row = format!("{label}, {name}");
            if std::env::var("REMFILE_BENCH_ONLY").is_ok_and(|only| !row.contains(&only)) {
                continue;
            }
            let server = ServerProcess::start(file, delay_ms, cap);
            let span = {
                let local = h5::File::open(file).unwrap();
                stored_span(&local.dataset("acquisition/ElectricalSeries/data").unwrap())
            };
            for _ in 0..repeats() {
                run(&row, &server.url, span.end - span.start);
                floor(&row, span.clone(), &server.url);
            }
            if *name == "generated" {
                raw_workloads(&row, &server.url);
            }
            if *name == "generated" && delay_ms == 0 {
                download(&row, &server.url);
            }
            if delay_ms > 0 && std::env::var("REMFILE_BENCH_PEERS").map_or(true, |v| v != "0") {
                peers(&row, file, &server.url);
            }
            print_medians();
        }
    }
}

/// An NWB file written by pynwb (`benches/write_nwb.py`, in the Python
/// environment `benches/setup-peers.sh` makes), once; `None`, with a note,
/// without that environment.
fn pynwb_file(name: &str, gzip: Option<u8>) -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let path = target_dir().join("bench-data").join(name);
    if path.exists() {
        return Some(path);
    }
    let Some(python) = bench_python() else {
        println!("({name}: run benches/setup-peers.sh for the pynwb-written files)");
        return None;
    };
    eprintln!("writing {} with pynwb (once)…", path.display());
    std::fs::create_dir_all(path.parent()?).ok()?;
    // pynwb warns of a file name without `.nwb`.
    let tmp = path.with_extension("partial.nwb");
    let mut cmd = Command::new(python);
    cmd.arg(root.join("benches/write_nwb.py")).arg(&tmp);
    if let Some(level) = gzip {
        cmd.args(["--gzip", &level.to_string()]);
    }
    let ok = cmd.status().is_ok_and(|s| s.success());
    (ok && std::fs::rename(&tmp, &path).is_ok()).then_some(path)
}

/// `source` rewritten in the latest file format by `h5repack -L` (Debian's
/// `hdf5-tools`), once: version 2 object headers and B-trees, dense storage,
/// newer chunk indexes.
fn latest_format(source: &Path, name: &str) -> Option<PathBuf> {
    let path = source.with_file_name(name);
    if path.exists() {
        return Some(path);
    }
    let tmp = path.with_extension("partial");
    let ok = Command::new("h5repack")
        .arg("-L")
        .arg(source)
        .arg(&tmp)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        println!("({name}: install hdf5-tools for h5repack)");
        return None;
    }
    std::fs::rename(&tmp, &path).ok()?;
    Some(path)
}

fn data_file(name: &str, deflate: Option<u8>) -> PathBuf {
    let dir = target_dir().join("bench-data");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    if !path.exists() {
        eprintln!("writing {} (once)…", path.display());
        let tmp = path.with_extension("partial");
        let shape = NwbShape {
            rows: ROWS,
            chunk_rows: NWB_CHUNK_ROWS,
            deflate,
            extra_groups: 70,
            format: h5files::Format::Default,
        };
        h5files::write_nwb(&tmp, shape).expect("write the benchmark file");
        std::fs::rename(&tmp, &path).unwrap();
    }
    path
}

/// One run of every phase through remfile; `stored` is the size of the
/// slice's chunks in the file.
fn run(label: &str, url: &str, stored: u64) {
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let (file, remote) = open_h5(url, h5::OpenOptions::new());
    report(label, "open", t0, cpu0, remote.stats(), None);

    let (before, cpu0, t0) = (remote.stats(), cpu_time(), Instant::now());
    let objects = h5files::walk_metadata(&file).unwrap();
    assert!(objects > 200, "{objects} objects");
    report(
        label,
        "metadata",
        t0,
        cpu0,
        remote.stats().since(&before),
        None,
    );
    let p = h5::driver_info(&file).unwrap().prefetch;
    note(format!(
        "    prefetch: {} of {} metadata reads foreseen; {} of {} addresses fetched ahead read; {:.1} MB fetched ahead",
        p.predicted_reads,
        p.predicted_reads + p.unpredicted_reads,
        p.targets_read,
        p.targets,
        p.speculative_bytes as f64 / 1e6
    ));

    // The slice read the plain way, with the defaults, after the walk.
    let ds = file.dataset("acquisition/ElectricalSeries/data").unwrap();
    read_slice(label, "bulk", &remote, &ds, stored, false);

    // Open and walk again without the metadata prefetch: what it saves.
    let (cpu0, t0) = (cpu_time(), Instant::now());
    let (file, remote) = open_h5(url, h5::OpenOptions::new().metadata_prefetch(false));
    h5files::walk_metadata(&file).unwrap();
    report(label, "open+meta, no pf", t0, cpu0, remote.stats(), None);
    let ds = file.dataset("acquisition/ElectricalSeries/data").unwrap();
    read_slice(label, "bulk, no pf", &remote, &ds, stored, false);

    // The same slice in a fresh file, its chunks prefetched in one round.
    // The open's metadata crawl ends first: its bytes are not the slice's.
    let (file, remote) = open_h5(url, h5::OpenOptions::new());
    let ds = file.dataset("acquisition/ElectricalSeries/data").unwrap();
    assert!(remote.wait_for_background_fetches(Duration::from_secs(60)));
    read_slice(label, "bulk, pf", &remote, &ds, stored, true);

    random_chunks(label, url);
    one_channel(label, url);
    disk_cache(label, url, stored);

    // HDF 1.14+ hands the driver one vector read for chunks that bypass its
    // chunk cache (uncompressed ones larger than the cache).
    if h5::library_version() >= (1, 14, 0) {
        let small_cache = h5::OpenOptions::new().chunk_cache(521, 1 << 20, 1.0);
        let (file, remote) = open_h5(url, small_cache);
        let ds = file.dataset("acquisition/ElectricalSeries/data").unwrap();
        read_slice(label, "bulk, vec", &remote, &ds, stored, false);
    }
}

/// Opens `url` as `hdf5::open_url` does (the superblock and the tail at once).
fn open_h5(url: &str, options: h5::OpenOptions) -> (h5::File, RemoteFile) {
    let mut builder = h5::builder().proxy_from_env(false);
    // For tuning: another block size than the default.
    if let Some(bytes) = std::env::var("REMFILE_BENCH_BLOCK")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        builder = builder.block_size(bytes);
    }
    let file = options.remote(builder).open_url(url).unwrap();
    let remote = h5::driver_info(&file).unwrap().remote;
    (file, remote)
}

/// Reads the slice (after prefetching its chunks, if asked) and reports it.
fn read_slice(
    label: &str,
    phase: &str,
    remote: &RemoteFile,
    ds: &h5::Dataset,
    stored: u64,
    prefetch: bool,
) {
    let calls = |ds: &h5::Dataset| {
        let info = h5::driver_info(&ds.file().unwrap()).unwrap();
        (info.read_calls, info.vector_calls)
    };
    let calls0 = calls(ds);
    let (before, cpu0, t0) = (remote.stats(), cpu_time(), Instant::now());
    if prefetch {
        let hyperslab = [SLICE.start as u64..SLICE.end as u64, 0..64];
        h5::prefetch_hyperslab(ds, &hyperslab).unwrap();
    }
    let rows = ds.read_slice_2d::<i16, _>((SLICE, ..)).unwrap();
    assert_eq!(rows.len(), (SLICE.end - SLICE.start) * 64);
    report(
        label,
        phase,
        t0,
        cpu0,
        remote.stats().since(&before),
        Some(stored),
    );
    let calls1 = calls(ds);
    let link = remote
        .link_estimate()
        .map_or("not measured".to_owned(), |l| {
            format!(
                "{:.0} ms, {:.0} MB/s per connection",
                l.round_trip.as_secs_f64() * 1e3,
                l.bytes_per_second as f64 / 1e6
            )
        });
    let p = h5::driver_info(&ds.file().unwrap()).unwrap().prefetch;
    note(format!(
        "    HDF5 made {} read and {} vector read calls ({} of listed chunks; {:.1} MB fetched ahead of them); link: {link}",
        calls1.0 - calls0.0,
        calls1.1 - calls0.1,
        p.chunk_reads,
        p.chunk_bytes_ahead as f64 / 1e6
    ));
}

/// One channel of a million rows, with the defaults, in a fresh file: the
/// most common NWB access (a column of 2 bytes in rows of 128, across 62
/// chunks of 2 MiB).
fn one_channel(label: &str, url: &str) {
    let (file, remote) = open_h5(url, h5::OpenOptions::new());
    let ds = file.dataset("acquisition/ElectricalSeries/data").unwrap();
    let calls0 = h5::driver_info(&file).unwrap().read_calls;
    let (before, cpu0, t0) = (remote.stats(), cpu_time(), Instant::now());
    let column = ds.read_slice_2d::<i16, _>((CHANNEL_ROWS, 5..6)).unwrap();
    assert_eq!(column.len(), CHANNEL_ROWS.end - CHANNEL_ROWS.start);
    let stored = (CHANNEL_ROWS.end - CHANNEL_ROWS.start) as u64 * 128;
    report(
        label,
        "one channel",
        t0,
        cpu0,
        remote.stats().since(&before),
        Some(stored),
    );
    let info = h5::driver_info(&file).unwrap();
    note(format!(
        "    HDF5 made {} read calls ({} of listed chunks; {:.1} MB fetched ahead of them)",
        info.read_calls - calls0,
        info.prefetch.chunk_reads,
        info.prefetch.chunk_bytes_ahead as f64 / 1e6
    ));
}

/// Open, walk and slice with a disk cache: once cold (filling it), then
/// warm, as a later run of a program finds it (a new memory cache).
fn disk_cache(label: &str, url: &str, stored: u64) {
    let dir = std::env::temp_dir().join(format!("remfile-bench-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for pass in ["cold", "warm"] {
        let disk = remfile::DiskCache::open(&dir, 4 << 30).unwrap();
        let (cpu0, t0) = (cpu_time(), Instant::now());
        let file = h5::OpenOptions::new()
            .remote(h5::builder().proxy_from_env(false).disk_cache(disk))
            .open_url(url)
            .unwrap();
        let remote = h5::driver_info(&file).unwrap().remote;
        report(
            label,
            &format!("disk {pass}: open"),
            t0,
            cpu0,
            remote.stats(),
            None,
        );
        let (before, cpu0, t0) = (remote.stats(), cpu_time(), Instant::now());
        h5files::walk_metadata(&file).unwrap();
        let walked = remote.stats();
        report(
            label,
            &format!("disk {pass}: meta"),
            t0,
            cpu0,
            walked.since(&before),
            None,
        );
        let (cpu0, t0) = (cpu_time(), Instant::now());
        let ds = file.dataset("acquisition/ElectricalSeries/data").unwrap();
        let rows = ds.read_slice_2d::<i16, _>((SLICE, ..)).unwrap();
        assert_eq!(rows.len(), (SLICE.end - SLICE.start) * 64);
        let s = remote.stats().since(&walked);
        report(
            label,
            &format!("disk {pass}: bulk"),
            t0,
            cpu0,
            s,
            Some(stored),
        );
        assert!(remote.wait_for_background_fetches(Duration::from_secs(60)));
        let s = remote.stats();
        note(format!(
            "    open + walk + slice: {} blocks from disk ({:.1} MB)",
            s.disk_hits,
            s.disk_bytes_read as f64 / 1e6
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Chunks read one at a time in no order (50 single-chunk selections
/// scattered over the recording), in a fresh file with the defaults: the
/// bytes fetched against the chunks' stored bytes.
fn random_chunks(label: &str, url: &str) {
    let (file, remote) = open_h5(url, h5::OpenOptions::new());
    let ds = file.dataset("acquisition/ElectricalSeries/data").unwrap();
    let chunks = ds.num_chunks().unwrap();
    // Its first read looks the chunk index up; not part of what is measured.
    ds.read_slice_2d::<i16, _>((0..1, ..)).unwrap();
    let stored_of = |k: usize| {
        (0..chunks)
            .filter_map(|i| ds.chunk_info(i))
            .find(|c| c.offset[0] as usize == k * NWB_CHUNK_ROWS)
            .map_or(0, |c| c.size)
    };
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let picks: Vec<usize> = (0..50)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            1 + (x % (chunks as u64 - 2)) as usize
        })
        .collect();
    let stored: u64 = picks.iter().map(|&k| stored_of(k)).sum();
    let (before, cpu0, t0) = (remote.stats(), cpu_time(), Instant::now());
    for &k in &picks {
        let rows = k * NWB_CHUNK_ROWS..(k + 1) * NWB_CHUNK_ROWS;
        ds.read_slice_2d::<i16, _>((rows, ..)).unwrap();
    }
    report(
        label,
        "50 random chunks",
        t0,
        cpu0,
        remote.stats().since(&before),
        Some(stored),
    );
}

/// The byte span the slice's chunks occupy in the file.
fn stored_span(ds: &h5::Dataset) -> std::ops::Range<u64> {
    let first = SLICE.start / NWB_CHUNK_ROWS;
    let last = (SLICE.end - 1) / NWB_CHUNK_ROWS;
    let infos: Vec<_> = (0..ds.num_chunks().unwrap())
        .filter_map(|i| ds.chunk_info(i))
        .filter(|c| (first..=last).contains(&(c.offset[0] as usize / NWB_CHUNK_ROWS)))
        .collect();
    let start = infos.iter().map(|c| c.addr).min().unwrap();
    let end = infos.iter().map(|c| c.addr + c.size).max().unwrap();
    start..end
}

/// The physical floor of the bulk read: one request of exactly its bytes.
fn floor(label: &str, span: std::ops::Range<u64>, url: &str) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .proxy(None)
        .build()
        .new_agent();
    let (cpu0, t0) = (cpu_time(), Instant::now());
    let mut resp = agent
        .get(url)
        .header("Range", format!("bytes={}-{}", span.start, span.end - 1))
        .call()
        .unwrap();
    let body = resp
        .body_mut()
        .with_config()
        .limit(span.end - span.start + 1)
        .read_to_vec()
        .unwrap();
    assert_eq!(body.len() as u64, span.end - span.start);
    let wall = t0.elapsed();
    emit(
        label,
        "floor",
        wall,
        Cells {
            requests: "1".into(),
            rounds: "1".into(),
            bytes: body.len() as f64,
            over: "1.00".into(),
            cpu: cpu_time().saturating_sub(cpu0),
            conns: new_connections().to_string(),
        },
    );
    print_server_log();
}

fn report(label: &str, phase: &str, t0: Instant, cpu0: Duration, s: Stats, needed: Option<u64>) {
    let over = needed.map_or("-".to_owned(), |n| {
        format!("{:.2}", s.bytes_fetched as f64 / n as f64)
    });
    let rounds = s.round_trips.to_string();
    report_row(label, phase, (t0, cpu0), &s, rounds, over);
}

/// Adds the row of a phase that started at `started` (wall and CPU time),
/// with the requests and bytes of `s`.
fn report_row(
    label: &str,
    phase: &str,
    started: (Instant, Duration),
    s: &Stats,
    rounds: String,
    over: String,
) {
    let (t0, cpu0) = started;
    let wall = t0.elapsed();
    let cpu = cpu_time().saturating_sub(cpu0);
    emit(
        label,
        phase,
        wall,
        Cells {
            requests: s.requests.to_string(),
            rounds,
            bytes: s.bytes_fetched as f64,
            over,
            cpu,
            conns: new_connections().to_string(),
        },
    );
    print_server_log();
}

/// Raw `RemoteFile` workloads on the plain file.
fn raw_workloads(label: &str, url: &str) {
    let open = || {
        RemoteFile::builder()
            .proxy_from_env(false)
            .open(url)
            .unwrap()
    };
    let file = open();
    let size = file.len();
    let mut cursor = file.clone();
    let scan = 64 * MIB;
    workload(label, "scan", &file, scan, || {
        let mut buf = vec![0u8; 64 * 1024];
        let mut done = 0;
        while done < scan {
            done += cursor.read(&mut buf).unwrap() as u64;
        }
    });
    let file = open();
    let mut x = 12345u64;
    workload(label, "random", &file, 100 * 4096, || {
        let mut buf = [0u8; 4096];
        for _ in 0..100 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            file.read_exact_at(x % (size - 4096), &mut buf).unwrap();
        }
    });
    let file = open();
    workload(label, "strided", &file, 64 * 4096, || {
        let mut buf = [0u8; 4096];
        for i in 0..64 {
            file.read_exact_at(i * 3 * MIB + 100, &mut buf).unwrap();
        }
    });
}

fn workload(label: &str, phase: &str, file: &RemoteFile, needed: u64, work: impl FnOnce()) {
    let (before, cpu0, t0) = (file.stats(), cpu_time(), Instant::now());
    work();
    report(
        label,
        phase,
        t0,
        cpu0,
        file.stats().since(&before),
        Some(needed),
    );
}

/// The whole file, four times, as the `download` example fetches it (32 MiB
/// pieces over 4 connections, into memory), then with curl: CPU time per GB.
/// (Four passes, because the CPU clock ticks in 10 ms.)
fn download(label: &str, url: &str) {
    const PASSES: u64 = 4;
    let file = RemoteFile::builder()
        .proxy_from_env(false)
        .block_size(4 * MIB)
        .split_size(8 * MIB)
        .cache_capacity(64 * MIB)
        .read_ahead_max(0)
        .open(url)
        .unwrap();
    let size = file.len();
    workload(label, "download", &file, PASSES * size, || {
        let mut buf = vec![0u8; 32 * MIB as usize];
        for _ in 0..PASSES {
            let mut pos = 0;
            while pos < size {
                let n = (size - pos).min(32 * MIB) as usize;
                file.read_exact_at(pos, &mut buf[..n]).unwrap();
                pos += n as u64;
            }
        }
    });
    let (cpu0, t0) = (children_cpu_time(), Instant::now());
    for _ in 0..PASSES {
        let status = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "--noproxy", "*", url])
            .status();
        if !status.is_ok_and(|s| s.success()) {
            println!("{label:<32} curl: not available");
            return;
        }
    }
    let wall = t0.elapsed();
    let label = format!("{label} [curl]");
    emit(
        &label,
        "download",
        wall,
        Cells {
            requests: PASSES.to_string(),
            rounds: PASSES.to_string(),
            bytes: (PASSES * size) as f64,
            over: "1.00".into(),
            cpu: children_cpu_time().saturating_sub(cpu0),
            conns: new_connections().to_string(),
        },
    );
    print_server_log();
}

/// How many times the remfile phases and the floor run; the table shows the
/// run of median wall time (`REMFILE_BENCH_REPEAT`, 3 by default).
fn repeats() -> usize {
    std::env::var("REMFILE_BENCH_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// One measured row of the table, with the lines that explain it.
struct Row {
    key: (String, String),
    wall: Duration,
    line: String,
    notes: Vec<String>,
}

static TABLE: std::sync::Mutex<Vec<Row>> = std::sync::Mutex::new(Vec::new());

/// The columns of a row after its label, phase and wall time.
struct Cells {
    requests: String,
    rounds: String,
    bytes: f64,
    over: String,
    cpu: Duration,
    conns: String,
}

fn emit(label: &str, phase: &str, wall: Duration, cells: Cells) {
    let line = format!(
        "{:<32} {:<16} {:>8.0} {:>5} {:>6} {:>7.1} {:>5} {:>7.0} {:>5}",
        label,
        phase,
        wall.as_secs_f64() * 1e3,
        cells.requests,
        cells.rounds,
        cells.bytes / 1e6,
        cells.over,
        cells.cpu.as_secs_f64() * 1e3,
        cells.conns
    );
    TABLE.lock().unwrap().push(Row {
        key: (label.to_owned(), phase.to_owned()),
        wall,
        line,
        notes: Vec::new(),
    });
}

/// A line printed under the last row.
fn note(text: String) {
    match TABLE.lock().unwrap().last_mut() {
        Some(row) => row.notes.push(text),
        None => println!("{text}"),
    }
}

/// Prints, for every label and phase, the run of median wall time.
fn print_medians() {
    let rows = std::mem::take(&mut *TABLE.lock().unwrap());
    let mut keys: Vec<&(String, String)> = Vec::new();
    for row in &rows {
        if !keys.contains(&&row.key) {
            keys.push(&row.key);
        }
    }
    for key in keys {
        let mut runs: Vec<&Row> = rows.iter().filter(|r| &r.key == key).collect();
        runs.sort_by_key(|r| r.wall);
        let median = runs[(runs.len() - 1) / 2];
        println!("{}", median.line);
        for text in &median.notes {
            println!("{text}");
        }
    }
}

/// Connections the server accepted since the last call.
fn new_connections() -> usize {
    static SEEN: std::sync::Mutex<(String, usize)> = std::sync::Mutex::new((String::new(), 0));
    let Some(base) = SERVER_BASE.lock().unwrap().clone() else {
        return 0;
    };
    let stats = get_text(&format!("{base}/__stats"));
    let total = stats
        .split("\"connections\": ")
        .nth(1)
        .and_then(|rest| rest.trim_end_matches('}').trim().parse().ok())
        .unwrap_or(0);
    let mut seen = SEEN.lock().unwrap();
    if seen.0 != base {
        *seen = (base, 0);
    }
    let opened = total - seen.1;
    seen.1 = total;
    opened
}

fn get_text(url: &str) -> String {
    ureq::Agent::config_builder()
        .proxy(None)
        .build()
        .new_agent()
        .get(url)
        .call()
        .and_then(|mut r| r.body_mut().read_to_string())
        .unwrap_or_default()
}

/// With `REMFILE_BENCH_LOG` set, the requests the server saw since the last call.
fn print_server_log() {
    use std::sync::Mutex;
    static SEEN: Mutex<(String, usize)> = Mutex::new((String::new(), 0));
    if std::env::var_os("REMFILE_BENCH_LOG").is_none() {
        return;
    }
    let Some(base) = SERVER_BASE.lock().unwrap().clone() else {
        return;
    };
    let log = get_text(&format!("{base}/__log"));
    let mut seen = SEEN.lock().unwrap();
    if seen.0 != base {
        *seen = (base, 0);
    }
    for line in log.lines().skip(seen.1) {
        note(format!("    {line}"));
    }
    seen.1 = log.lines().count();
}

/// The running server's `http://host:port`, for its request log.
static SERVER_BASE: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// The other readers, by `benches/peers.py`, if `benches/setup-peers.sh` ran.
fn peers(label: &str, file: &Path, url: &str) {
    let venv = target_dir().join("peers-venv/bin/python");
    if !venv.exists() {
        println!("{label:<32} peers: run benches/setup-peers.sh first");
        return;
    }
    let runs: [(&Path, &[&str]); 3] = [
        (
            &venv,
            &["remfile-py", "fsspec", "local", "wheel", "wheel-fileobj"],
        ),
        (&venv, &["plugin"]),
        (Path::new("/usr/bin/python3"), &["ros3"]),
    ];
    // ros3 makes one request per HDF5 read: a walk takes minutes.
    let ros3 = std::env::var("REMFILE_BENCH_ROS3").map_or(true, |v| v != "0");
    for (python, names) in runs.into_iter().filter(|(_, n)| ros3 || n[0] != "ros3") {
        run_peers(label, python, &[], names, file, url);
    }
}

/// Runs `benches/peers.py` with `python` (and `mode`'s arguments first) for
/// the readers `names` on `file` served at `url`, and adds its rows.
fn run_peers(label: &str, python: &Path, mode: &[&str], names: &[&str], file: &Path, url: &str) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/peers.py");
    let mut cmd = Command::new(python);
    cmd.arg(&script).args(mode).arg(url).arg(file).args(names);
    if names == ["plugin"] {
        let Some(dir) = plugin_dir() else {
            println!("{label:<32} plugin: could not build hdf5-plugin");
            return;
        };
        cmd.env("HDF5_PLUGIN_PATH", dir)
            .env("HDF5_DRIVER", "remfile");
    }
    let Ok(out) = cmd.output() else {
        println!(
            "{label:<32} peers {names:?}: cannot run {}",
            python.display()
        );
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        print_peer_line(label, line);
    }
}

/// Prints one JSON line of peers.py as a table row.
/// A directory holding the plugin alone, built (release) once.
fn plugin_dir() -> Option<PathBuf> {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| plugin_build::plugin_dir(true).ok())
        .clone()
}

fn print_peer_line(label: &str, line: &str) {
    let field = |name: &str| -> Option<&str> {
        let at = line.find(&format!("\"{name}\": "))? + name.len() + 4;
        let rest = &line[at..];
        let end = rest.find([',', '}']).unwrap_or(rest.len());
        Some(rest[..end].trim().trim_matches('"'))
    };
    let peer = field("peer").unwrap_or("?");
    if let Some(err) = field("error") {
        note(format!("{label:<32} {peer}: {err}"));
        return;
    }
    let num = |name: &str| {
        field(name)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    let label = format!("{label} [{peer}]");
    let phase = field("phase").unwrap_or("?");
    emit(
        &label,
        phase,
        Duration::from_secs_f64(num("wall").max(0.0)),
        Cells {
            requests: num("requests").to_string(),
            rounds: field("rounds").unwrap_or("-").to_owned(),
            bytes: num("bytes"),
            over: "-".into(),
            cpu: Duration::from_secs_f64(num("cpu").max(0.0)),
            conns: num("connections").to_string(),
        },
    );
}

/// The server, in a child process of this same binary.
struct ServerProcess {
    child: Child,
    url: String,
}

impl ServerProcess {
    /// Serves `file` (or every file of a directory) at `delay_ms` per
    /// request and per new connection, `cap` bytes per second per
    /// connection if capped.
    fn start(file: &Path, delay_ms: u64, cap: Option<f64>) -> ServerProcess {
        ServerProcess::start_capped(file, delay_ms, cap, None)
    }

    /// The same, with `total` bytes per second shared by all connections
    /// too, if capped.
    fn start_capped(
        file: &Path,
        delay_ms: u64,
        cap: Option<f64>,
        total: Option<f64>,
    ) -> ServerProcess {
        let bps = |c: Option<f64>| c.map_or(String::from("-"), |c| c.to_string());
        let spec = format!("{}|{delay_ms}|{}|{}", file.display(), bps(cap), bps(total));
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env("REMFILE_BENCH_SERVE", spec)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the server process");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line.trim().to_owned();
        *SERVER_BASE.lock().unwrap() = url
            .strip_suffix("/data.nwb")
            .or(url.strip_suffix('/'))
            .map(str::to_owned);
        ServerProcess { child, url }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child's side: serve the file, print the URL, run until killed.
///
/// The spec is `PATH|DELAY_MS|CAP|TOTAL`: the file or directory, the delay
/// per request and per new connection, and the bytes per second per
/// connection and shared by all of them, `-` where uncapped (`TOTAL` may be
/// left out).
fn serve(spec: &str) {
    use std::os::unix::fs::MetadataExt;
    let mut parts = spec.split('|');
    let path = parts.next().unwrap();
    let delay: u64 = parts.next().unwrap().parse().unwrap();
    let cap = parts.next().unwrap().parse::<f64>().ok();
    let total = parts.next().and_then(|t| t.parse::<f64>().ok());
    let shape = Shape {
        request_delay: Duration::from_millis(delay),
        connect_delay: Duration::from_millis(delay),
        per_connection_bps: cap,
        total_bps: total,
    };
    let _server = if Path::new(path).is_dir() {
        // Every file of the directory, at /NAME; hard links of one file
        // (the 36-file survey's) share one copy in memory.
        let mut read: std::collections::HashMap<(u64, u64), Arc<Vec<u8>>> = Default::default();
        let files = std::fs::read_dir(path)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_file())
            .map(|e| {
                let name = format!("/{}", e.file_name().to_string_lossy());
                let meta = std::fs::metadata(e.path()).unwrap();
                let data = read
                    .entry((meta.dev(), meta.ino()))
                    .or_insert_with(|| Arc::new(std::fs::read(e.path()).unwrap()));
                (name, data.clone())
            })
            .collect();
        let server = CloudServer::start_files(files, shape);
        println!("{}", server.url("/"));
        server
    } else {
        let server = CloudServer::start(Arc::new(std::fs::read(path).unwrap()), shape);
        println!("{}", server.url("/data.nwb"));
        server
    };
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// The survey tables (`REMFILE_BENCH_SURVEY_SET`: `corpus`, `36` or `all`,
/// the default): the corpus, one file per writer, and 36 files of six
/// kinds; every reader, one process each run.
fn survey() {
    let full = std::env::var("REMFILE_BENCH_SURVEY").is_ok_and(|v| v == "full");
    let (dir, size) = if full {
        (target_dir().join("bench-data/corpus"), "full")
    } else {
        (target_dir().join("bench-data/survey"), "small")
    };
    let Some(python) = python_with_corpus("survey", &dir, size) else {
        return;
    };
    let set = std::env::var("REMFILE_BENCH_SURVEY_SET").unwrap_or_else(|_| "all".into());
    if !["corpus", "36", "all"].contains(&set.as_str()) {
        println!("survey: REMFILE_BENCH_SURVEY_SET is corpus, 36 or all, not {set:?}");
        return;
    }
    if set != "36" {
        survey_table(
            &python,
            &format!("the {size} corpus"),
            &dir,
            &[
                ("30 ms", None, None),
                ("30 ms, 25 MB/s per conn", Some(25e6), None),
            ],
        );
    }
    if set != "corpus" {
        let Some(many) = survey36_dir(&dir, size) else {
            return;
        };
        survey_table(
            &python,
            &format!("36 files of the {size} corpus"),
            &many,
            &[
                ("30 ms", None, None),
                ("30 ms, 12.5 MB/s shared", None, Some(12.5e6)),
                ("30 ms, 125 MB/s shared", None, Some(125e6)),
            ],
        );
    }
}

/// The 36-file survey's kinds, each under six names.
const SURVEY36_KINDS: [&str; 6] = [
    "nwb_deep.nwb",
    "nwb_ophys.nwb",
    "nwb_icephys.nwb",
    "netcdf4.nc",
    "anndata.h5ad",
    "h5py_track_order_v110.h5",
];

/// `bench-data/survey36-SIZE` under the target directory: hard links
/// `KIND-1.EXT` to `KIND-6.EXT` of each of [`SURVEY36_KINDS`] in `corpus`,
/// remade where a corpus file was rewritten.
fn survey36_dir(corpus: &Path, size: &str) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let dir = target_dir().join(format!("bench-data/survey36-{size}"));
    let made = (|| -> std::io::Result<()> {
        std::fs::create_dir_all(&dir)?;
        for kind in SURVEY36_KINDS {
            let source = corpus.join(kind);
            let meta = std::fs::metadata(&source)?;
            let (stem, ext) = kind.rsplit_once('.').unwrap();
            for i in 1..=6 {
                let link = dir.join(format!("{stem}-{i}.{ext}"));
                match std::fs::metadata(&link) {
                    Ok(m) if (m.dev(), m.ino()) == (meta.dev(), meta.ino()) => continue,
                    Ok(_) => std::fs::remove_file(&link)?,
                    Err(_) => {}
                }
                std::fs::hard_link(&source, &link)?;
            }
        }
        Ok(())
    })();
    match made {
        Ok(()) => Some(dir),
        Err(e) => {
            println!(
                "survey: cannot link the 36 files into {}: {e}",
                dir.display()
            );
            None
        }
    }
}

/// The survey's readers (`REMFILE_BENCH_READERS`, comma-separated, runs
/// only those it names).
const SURVEY_READERS: [&str; 7] = [
    "local",
    "local-count",
    "wheel",
    "wheel-prefetch",
    "wheel-fileobj",
    "fsspec",
    "remfile-py",
];

/// One survey table: the files of `dir` served by one server per shape
/// (label, bytes per second per connection, shared by all), every reader
/// `REMFILE_BENCH_REPEAT` times (2 by default), each run a row.
fn survey_table(
    python: &Path,
    title: &str,
    dir: &Path,
    shapes: &[(&str, Option<f64>, Option<f64>)],
) {
    let readers: Vec<&str> = SURVEY_READERS
        .into_iter()
        .filter(|reader| {
            std::env::var("REMFILE_BENCH_READERS")
                .map_or(true, |only| only.split(',').any(|r| r == *reader))
        })
        .collect();
    let runs = std::env::var("REMFILE_BENCH_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    // What HDF5 itself reads of the local copies, for the ratio column.
    let counted = run_survey(python, "http://127.0.0.1:9", dir, "local-count");
    let hdf5_bytes = survey_field(&counted, "hdf5_bytes").and_then(|v| v.parse::<f64>().ok());
    let reference = survey_field(&counted, "digest").unwrap_or_default();
    let hdf5_kinds = by_kind(
        survey_field(&counted, "hdf5_by_file")
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|pair| {
                let (name, bytes) = pair.rsplit_once(':')?;
                Some((name.to_owned(), bytes.parse().ok()?, 0))
            }),
    );
    println!();
    match hdf5_bytes {
        Some(bytes) => println!(
            "Survey of {title}: {} files; HDF5 reads {:.2} MB of them in {} reads (local-count)",
            survey_field(&counted, "files").unwrap_or_default(),
            bytes / 1e6,
            survey_field(&counted, "hdf5_reads").unwrap_or_default()
        ),
        None => println!("Survey of {title}: local-count failed: {counted}"),
    }
    println!(
        "    HDF5's MB by kind: {}",
        hdf5_kinds
            .iter()
            .map(|(kind, bytes, _)| format!("{kind} {:.3}", *bytes as f64 / 1e6))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "{:<24} {:<14} {:>5} {:>8} {:>7} {:>5} {:>6} {:>5} {:>8} {:>7} {:>8}  digest",
        "server",
        "reader",
        "files",
        "wall ms",
        "cpu ms",
        "reqs",
        "rounds",
        "conns",
        "MB",
        "/hdf5",
        "x fsspec"
    );
    for &(label, cap, total) in shapes {
        if std::env::var("REMFILE_BENCH_SHAPE").is_ok_and(|only| label != only) {
            continue;
        }
        let server = ServerProcess::start_capped(dir, 30, cap, total);
        let base = server.url.trim_end_matches('/').to_owned();
        let mut lines: Vec<String> = Vec::new();
        let mut notes: Vec<String> = Vec::new();
        for &reader in &readers {
            for run in 0..runs {
                let mark = get_text(&format!("{base}/__log")).lines().count();
                lines.push(run_survey(python, &base, dir, reader));
                if run == 0 && !reader.starts_with("local") {
                    notes.push(fetched_by_kind(reader, &base, mark, &hdf5_kinds));
                }
            }
        }
        let fsspec = lines
            .iter()
            .filter(|l| survey_field(l, "reader").as_deref() == Some("fsspec"))
            .filter_map(|l| survey_field(l, "wall")?.parse::<f64>().ok())
            .reduce(f64::min);
        for line in &lines {
            print_survey_line(label, line, hdf5_bytes, fsspec, &reference);
        }
        for text in notes {
            println!("    {text}");
        }
        if std::env::var_os("REMFILE_BENCH_LOG").is_some() {
            print!("{}", get_text(&format!("{base}/__log")));
        }
    }
}

/// One run of `benches/survey.py`: its JSON line, or what went wrong.
fn run_survey(python: &Path, base: &str, dir: &Path, reader: &str) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/survey.py");
    match Command::new(python)
        .arg(script)
        .args([base, dir.to_str().unwrap(), reader])
        .output()
    {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        Ok(out) => format!(
            "{{\"reader\": \"{reader}\", \"error\": {:?}}}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("failed")
        ),
        Err(e) => format!(
            "{{\"reader\": \"{reader}\", \"error\": \"cannot run {}: {e}\"}}",
            python.display()
        ),
    }
}

/// The kind of a served file: its name without the extension and without
/// the 36-file survey's `-N`.
fn file_kind(name: &str) -> String {
    let name = name.trim_start_matches('/');
    let stem = name.rsplit_once('.').map_or(name, |(stem, _)| stem);
    match stem.rsplit_once('-') {
        Some((kind, n)) if n.bytes().all(|b| b.is_ascii_digit()) => kind.to_owned(),
        _ => stem.to_owned(),
    }
}

/// (name, bytes, requests) summed by [`file_kind`], in the order first seen.
fn by_kind(items: impl Iterator<Item = (String, u64, u64)>) -> Vec<(String, u64, u64)> {
    let mut kinds: Vec<(String, u64, u64)> = Vec::new();
    for (name, bytes, requests) in items {
        let kind = file_kind(&name);
        match kinds.iter_mut().find(|k| k.0 == kind) {
            Some(k) => {
                k.1 += bytes;
                k.2 += requests;
            }
            None => kinds.push((kind, bytes, requests)),
        }
    }
    kinds
}

/// What `reader` fetched of each kind of file, from the server's log since
/// line `mark`: MB, requests and the ratio to HDF5's bytes of that kind.
fn fetched_by_kind(reader: &str, base: &str, mark: usize, hdf5: &[(String, u64, u64)]) -> String {
    let log = get_text(&format!("{base}/__log"));
    let fetched = by_kind(log.lines().skip(mark).filter_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        let sent = words.iter().position(|w| *w == "B")?.checked_sub(1)?;
        Some(((*words.last()?).to_owned(), words[sent].parse().ok()?, 1))
    }));
    let cells: Vec<String> = fetched
        .iter()
        .map(|(kind, bytes, requests)| {
            let ratio = hdf5
                .iter()
                .find(|h| &h.0 == kind && h.1 > 0)
                .map_or(String::new(), |h| {
                    format!(" {:.1}x", *bytes as f64 / h.1 as f64)
                });
            format!("{kind} {:.2} MB/{requests}{ratio}", *bytes as f64 / 1e6)
        })
        .collect();
    format!(
        "{reader:<14} by kind (MB/reqs, x HDF5's): {}",
        cells.join(", ")
    )
}

/// The Python of the benchmark's readers and writers: `REMFILE_BENCH_PYTHON`,
/// or the environment `benches/setup-peers.sh` made (or CI's).
fn bench_python() -> Option<PathBuf> {
    std::env::var_os("REMFILE_BENCH_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .chain(
            ["peers-venv/bin/python", "plugin-venv/bin/python"]
                .iter()
                .map(|p| target_dir().join(p)),
        )
        .find(|p| p.exists())
}

/// Cargo's target directory: `CARGO_TARGET_DIR` if set (relative to the
/// package), else the package's `target`. The benchmark's data and Python
/// environments live under it.
fn target_dir() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => root.join(dir),
        _ => root.join("target"),
    }
}

/// The Python of the benchmark's readers ([`bench_python`]), once `benches/corpus.py`
/// has written the corpus of `size` into `dir`; `None`, with a note saying
/// why, for `what` (the table).
fn python_with_corpus(what: &str, dir: &Path, size: &str) -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let Some(python) = bench_python() else {
        println!("{what}: run benches/setup-peers.sh first");
        return None;
    };
    let written = Command::new(&python)
        .arg(root.join("benches/corpus.py"))
        .arg(dir)
        .args(["--size", size])
        .status()
        .is_ok_and(|s| s.success());
    if !written {
        println!(
            "{what}: benches/corpus.py failed (it needs pynwb, netCDF4, tables, h5netcdf, anndata)"
        );
        return None;
    }
    Some(python)
}

/// One JSON line of survey.py as a table row.
fn survey_field(line: &str, key: &str) -> Option<String> {
    let at = line.find(&format!("\"{key}\": "))? + key.len() + 4;
    let rest = &line[at..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim_matches('"').to_owned())
}

/// One JSON line of survey.py as a table row: `hdf5` the bytes HDF5 read
/// of the local copies (the ratio column), `fsspec` fsspec's fastest wall
/// time on the same server (the last column), `reference` the digest every
/// reader must give.
fn print_survey_line(
    label: &str,
    line: &str,
    hdf5: Option<f64>,
    fsspec: Option<f64>,
    reference: &str,
) {
    let f = |k| survey_field(line, k).unwrap_or_default();
    let num = |k| f(k).parse::<f64>().unwrap_or(f64::NAN);
    if line.is_empty() || line.contains("\"error\"") {
        println!("{label:<24} {line}");
        return;
    }
    let remote = !f("reader").starts_with("local");
    let ratio = match hdf5 {
        Some(hdf5) if remote && hdf5 > 0.0 => format!("{:.1}", num("bytes") / hdf5),
        _ => "-".into(),
    };
    let versus = fsspec.map_or("-".into(), |w| format!("{:.2}", num("wall") / w));
    let digest = f("digest");
    let differs = if digest == reference {
        ""
    } else {
        " (differs)"
    };
    println!(
        "{label:<24} {:<14} {:>5} {:>8.0} {:>7.0} {:>5} {:>6} {:>5} {:>8.2} {:>7} {:>8}  {digest}{differs}",
        f("reader"),
        f("files"),
        num("wall") * 1e3,
        num("cpu") * 1e3,
        f("requests"),
        f("rounds"),
        f("connections"),
        num("bytes") / 1e6,
        ratio,
        versus,
    );
}

/// The corpus's nwb_deep rewritten by `h5repack -L`.
const LATEST_NWB: &str = "nwb_deep_latest.nwb";

/// The corpus table: every file, workload and reader, at 30 ms per request
/// and at 25 MB/s per connection too.
fn corpus() {
    let dir = target_dir().join("bench-data/corpus");
    let Some(python) = python_with_corpus("corpus", &dir, "full") else {
        return;
    };
    let (major, minor, patch) = h5::library_version();
    println!("HDF5 {major}.{minor}.{patch} (the Rust adapter)");
    println!(
        "{:<32} {:<16} {:>8} {:>5} {:>6} {:>7} {:>5} {:>7} {:>5}",
        "server, file", "phase", "wall ms", "reqs", "rounds", "MB", "over", "cpu ms", "conns"
    );
    // Beside the writers' own files, the pynwb session rewritten in the
    // latest format (v2 B-trees, dense storage, array chunk indexes).
    let mut names: Vec<String> = python::CORPUS.iter().map(|&n| n.to_owned()).collect();
    if let Some(latest) = latest_format(&dir.join("nwb_deep.nwb"), LATEST_NWB) {
        names.extend(latest.file_name().map(|n| n.to_string_lossy().into_owned()));
    }
    // And any file the user names (`REMFILE_BENCH_CORPUS_EXTRA`, paths
    // separated by `:`).
    if let Some(extra) = std::env::var_os("REMFILE_BENCH_CORPUS_EXTRA") {
        names.extend(std::env::split_paths(&extra).map(|p| p.to_string_lossy().into_owned()));
    }
    for (label, delay_ms, cap) in [("30 ms", 30, None), ("30 ms, 25 MB/s", 30, Some(25e6))] {
        for name in &names {
            // A file named by its path shows its name alone.
            let path = dir.join(name);
            let short = path
                .file_name()
                .map_or_else(|| name.clone(), |n| n.to_string_lossy().into());
            let row = format!("{label}, {short}");
            if std::env::var("REMFILE_BENCH_ONLY").is_ok_and(|only| !row.contains(&only)) {
                continue;
            }
            let server = ServerProcess::start(&path, delay_ms, cap);
            for _ in 0..repeats() {
                corpus_walk(&row, &path, &server.url);
            }
            if std::env::var("REMFILE_BENCH_PEERS").map_or(true, |v| v != "0") {
                corpus_peers(&row, &python, &path, &server.url);
            }
            print_medians();
        }
    }
}

/// The Rust adapter on one corpus file: open and walk as users do (every
/// object's info, every chunk index, every attribute), then a slice of the
/// largest chunked dataset (its first rows, up to about 16 MB).
fn corpus_walk(label: &str, path: &Path, url: &str) {
    let local = match h5::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            note(format!("{label}: this HDF5 cannot read it: {e}"));
            return;
        }
    };
    let mark = server_log_len();
    let (cpu0, t0) = (cpu_time(), Instant::now());
    let (file, remote) = open_h5(url, h5::OpenOptions::new());
    let objects = h5files::walk_all_info(&file).unwrap();
    let walked = remote.stats();
    corpus_report(label, "open+walk", t0, cpu0, walked, mark);
    let p = h5::driver_info(&file).unwrap().prefetch;
    note(format!(
        "    {objects} objects; prefetch: {:.2} MB of metadata read by HDF5, {:.2} MB fetched ahead, \
         {} of {} addresses fetched ahead read",
        p.metadata_bytes as f64 / 1e6,
        p.speculative_bytes as f64 / 1e6,
        p.targets_read,
        p.targets
    ));
    if let Some((dataset, rows)) = largest_chunked(&local) {
        let ds = file.dataset(&dataset).unwrap();
        let (before, mark, cpu0, t0) =
            (remote.stats(), server_log_len(), cpu_time(), Instant::now());
        read_rows(&ds, rows);
        corpus_report(
            label,
            "slice",
            t0,
            cpu0,
            remote.stats().since(&before),
            mark,
        );
        note(format!("    {dataset}, rows 0..{rows}"));
    }
    assert!(remote.wait_for_background_fetches(Duration::from_secs(60)));
    corpus_disk_walk(label, url);
}

/// Open and walk through a disk cache: cold (filling it), then warm, as the
/// next run of a program finds it.
fn corpus_disk_walk(label: &str, url: &str) {
    let dir =
        std::env::temp_dir().join(format!("remfile-bench-corpus-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for pass in ["cold", "warm"] {
        let disk = remfile::DiskCache::open(&dir, 4 << 30).unwrap();
        let mark = server_log_len();
        let (cpu0, t0) = (cpu_time(), Instant::now());
        let file = h5::OpenOptions::new()
            .remote(h5::builder().proxy_from_env(false).disk_cache(disk.clone()))
            .open_url(url)
            .unwrap();
        let remote = h5::driver_info(&file).unwrap().remote;
        h5files::walk_all_info(&file).unwrap();
        corpus_report(
            label,
            &format!("disk {pass}: o+w"),
            t0,
            cpu0,
            remote.stats(),
            mark,
        );
        drop(file);
        assert!(remote.wait_for_background_fetches(Duration::from_secs(60)));
        assert!(disk.flush(Duration::from_secs(60)));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The chunked numeric dataset with the most elements, and how many of
/// its first rows make about 16 MB (at least one chunk's).
fn largest_chunked(file: &h5::File) -> Option<(String, usize)> {
    let (path, ds) = h5files::largest_chunked(file)?;
    let (chunk, shape) = (ds.chunk()?, ds.shape());
    let row: usize = shape[1..].iter().product::<usize>() * ds.dtype().ok()?.size();
    let rows = ((16 << 20) / row.max(1)).max(chunk[0]).min(shape[0]);
    Some((path, rows))
}

/// A row of the corpus table: requests and bytes as the reader counted them,
/// rounds from the server's log since `mark`.
fn corpus_report(label: &str, phase: &str, t0: Instant, cpu0: Duration, s: Stats, mark: usize) {
    let rounds = server_rounds(mark).to_string();
    report_row(label, phase, (t0, cpu0), &s, rounds, "-".into());
}

/// The (arrival, end) times in ms of every request in the server's log.
fn server_log_times() -> Vec<(f64, f64)> {
    let Some(base) = SERVER_BASE.lock().unwrap().clone() else {
        return Vec::new();
    };
    get_text(&format!("{base}/__log"))
        .lines()
        .filter_map(|line| {
            let (times, _) = line.rsplit_once(" ms")?;
            let (arrived, done) = times.rsplit_once("..")?;
            let arrived = arrived.rsplit(' ').next()?.trim().parse().ok()?;
            Some((arrived, done.trim().parse().ok()?))
        })
        .collect()
}

fn server_log_len() -> usize {
    server_log_times().len()
}

/// Rounds of the requests logged since `mark`: those sent before any
/// answer of the current round came back belong to it; one sent after
/// starts the next (as `benches/peers.py` counts them).
fn server_rounds(mark: usize) -> usize {
    let mut times = server_log_times().split_off(mark.min(server_log_len()));
    times.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut count, mut first_answer) = (0, f64::NEG_INFINITY);
    for (arrived, done) in times {
        if count == 0 || arrived >= first_answer {
            count += 1;
            first_answer = done;
        } else {
            first_answer = first_answer.min(done);
        }
    }
    count
}

/// The other readers on one corpus file, by `benches/peers.py --corpus`.
fn corpus_peers(label: &str, python: &Path, file: &Path, url: &str) {
    let others = ["remfile-py", "fsspec", "local", "wheel", "wheel-fileobj"];
    for names in [&others[..], &["plugin"]] {
        run_peers(label, python, &["--corpus"], names, file, url);
    }
}

/// Reads the first `rows` rows of `ds`.
fn read_rows(ds: &h5::Dataset, rows: usize) {
    let shape = ds.shape();
    let ranges: Vec<_> = std::iter::once(0..rows)
        .chain(shape[1..].iter().map(|&n| 0..n))
        .collect();
    h5files::read_selection_bytes(ds, &ranges);
}
