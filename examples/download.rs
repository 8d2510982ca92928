//! Downloads a remote file with parallel range requests, a progress bar, and
//! resumption: an interrupted download continues where it stopped, if the
//! remote file is still the same (size, ETag, Last-Modified).
//!
//! ```text
//! cargo run --release --example download -- URL [OUTPUT] [--connections N]
//! cargo run --release --example download      # a self-check against a local server
//! ```
//!
//! The download goes to `OUTPUT.part`, with its progress in
//! `OUTPUT.part.state`; both become `OUTPUT` when it completes. Without a URL,
//! a generated file is served from 127.0.0.1 and downloaded twice over: once
//! interrupted halfway, once resumed; the result is compared with the original.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use remfile::RemoteFile;

/// Bytes per piece: the unit of progress and of resumption.
const PIECE: u64 = 32 << 20;

struct Options {
    connections: u64,
    /// Stop after this many pieces (to simulate an interruption).
    max_pieces: Option<usize>,
    proxy_from_env: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut positional = Vec::new();
    let mut connections = 4;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--connections" => {
                connections = it.next().ok_or("--connections needs a value")?.parse()?;
            }
            "-h" | "--help" => {
                println!("usage: download [URL [OUTPUT]] [--connections N]");
                return Ok(());
            }
            _ => positional.push(arg),
        }
    }
    match positional.as_slice() {
        [] => self_check(connections),
        [url] => {
            let name = url_file_name(url);
            download(url, Path::new(&name), &real(connections))
        }
        [url, out] => download(url, Path::new(out), &real(connections)),
        _ => Err("usage: download [URL [OUTPUT]] [--connections N]".into()),
    }
}

fn real(connections: u64) -> Options {
    Options {
        connections,
        max_pieces: None,
        proxy_from_env: true,
    }
}

fn url_file_name(url: &str) -> String {
    let path = url.split(['?', '#']).next().unwrap_or("");
    match path.rsplit('/').next() {
        Some(name) if !name.is_empty() => name.to_owned(),
        _ => "download.bin".to_owned(),
    }
}

/// What identifies the remote file, to resume only the same one.
fn identity(file: &RemoteFile) -> String {
    format!(
        "size={} etag={} last-modified={}",
        file.len(),
        file.etag().unwrap_or("-"),
        file.last_modified().unwrap_or("-")
    )
}

fn state_path(part: &Path) -> PathBuf {
    let mut s = part.as_os_str().to_owned();
    s.push(".state");
    PathBuf::from(s)
}

/// The pieces already done, if the state on disk belongs to this remote file.
fn load_state(part: &Path, id: &str, pieces: usize, size: u64) -> Option<Vec<bool>> {
    let text = fs::read_to_string(state_path(part)).ok()?;
    let (saved_id, done) = text.split_once('\n')?;
    let part_len = fs::metadata(part).ok()?.len();
    if saved_id != id || part_len != size || done.trim().len() != pieces {
        return None;
    }
    Some(done.trim().chars().map(|c| c == '1').collect())
}

fn save_state(part: &Path, id: &str, done: &[bool]) -> io::Result<()> {
    let marks: String = done.iter().map(|&d| if d { '1' } else { '0' }).collect();
    let tmp = state_path(part).with_extension("state.tmp");
    fs::write(&tmp, format!("{id}\n{marks}\n"))?;
    fs::rename(tmp, state_path(part))
}

fn download(url: &str, out: &Path, opts: &Options) -> Result<(), Box<dyn std::error::Error>> {
    let remote = RemoteFile::builder()
        .proxy_from_env(opts.proxy_from_env)
        .block_size(4 << 20)
        .split_size(8 << 20)
        .max_concurrent_requests(opts.connections)
        .cache_capacity(2 * PIECE)
        .read_ahead_max(0)
        .open(url)?;
    let size = remote.len();
    let id = identity(&remote);
    let pieces = size.div_ceil(PIECE) as usize;
    let mut part_name = out.as_os_str().to_owned();
    part_name.push(".part");
    let part = PathBuf::from(part_name);

    let (mut done, mut sink) = match load_state(&part, &id, pieces, size) {
        Some(done) => (done, OpenOptions::new().write(true).open(&part)?),
        None => {
            let f = File::create(&part)?;
            f.set_len(size)?;
            (vec![false; pieces], f)
        }
    };
    let already: u64 = (0..pieces)
        .filter(|&i| done[i])
        .map(|i| piece_len(i, size))
        .sum();
    if already > 0 {
        eprintln!(
            "resuming {}: {already} of {size} bytes already here",
            out.display()
        );
    }
    let bar = ProgressBar::new(size).with_position(already);
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
    )?);

    let started = Instant::now();
    let mut buf = vec![0u8; PIECE as usize];
    let todo: Vec<usize> = (0..pieces).filter(|&i| !done[i]).collect();
    for (fetched_now, i) in todo.into_iter().enumerate() {
        if opts.max_pieces.is_some_and(|max| fetched_now >= max) {
            bar.abandon();
            return Err("stopped early, as asked".into());
        }
        let start = i as u64 * PIECE;
        let len = piece_len(i, size) as usize;
        remote.read_exact_at(start, &mut buf[..len])?;
        sink.seek(SeekFrom::Start(start))?;
        sink.write_all(&buf[..len])?;
        sink.sync_data()?;
        done[i] = true;
        save_state(&part, &id, &done)?;
        bar.inc(len as u64);
    }
    bar.finish();
    drop(sink);
    fs::rename(&part, out)?;
    let _ = fs::remove_file(state_path(&part));
    let secs = started.elapsed().as_secs_f64();
    let s = remote.stats();
    eprintln!(
        "{}: {size} bytes in {secs:.2} s ({:.1} MB/s), {} requests, {} bytes fetched",
        out.display(),
        (size - already) as f64 / secs.max(1e-9) / 1e6,
        s.requests,
        s.bytes_fetched
    );
    Ok(())
}

fn piece_len(i: usize, size: u64) -> u64 {
    (size - i as u64 * PIECE).min(PIECE)
}

fn self_check(connections: u64) -> Result<(), Box<dyn std::error::Error>> {
    let data = remfile_testkit::test_data((5 * PIECE + 12_345) as usize, 9);
    let server = remfile_testkit::RangeServer::new(data.clone());
    let dir = std::env::temp_dir().join(format!("remfile-download-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let out = dir.join("data.bin");
    let url = server.url("/data.bin");
    let mut opts = Options {
        connections,
        max_pieces: Some(3),
        proxy_from_env: false,
    };
    println!("downloading {url}, interrupted after 3 of 6 pieces");
    let interrupted = download(&url, &out, &opts);
    assert!(interrupted.is_err() && !out.exists());
    let requests_before = server.requests();
    opts.max_pieces = None;
    download(&url, &out, &opts)?;
    let got = fs::read(&out)?;
    assert!(got == data, "the downloaded file differs from the original");
    let fetched: u64 = server.ranges()[requests_before..]
        .iter()
        .map(|(a, b)| b - a + 1)
        .sum();
    println!(
        "resumed and completed: all {} bytes match; the resumed run fetched {fetched} bytes",
        got.len()
    );
    assert!(
        fetched < data.len() as u64 * 6 / 10,
        "resumption skipped the done pieces"
    );
    fs::remove_dir_all(&dir)?;
    Ok(())
}
