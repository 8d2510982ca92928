//! The whole HDF5 driver under attack: a file (mutated HDF5, mostly) served
//! from memory at a size of the input's choosing, opened through
//! [`remfile::hdf5`] (the metadata crawl and the chunk read-ahead on or off),
//! walked — every group, dataset and attribute, the datasets' first bytes
//! read — and the same walk made by HDF5's own `sec2` driver on a copy of
//! the bytes. The harness fails (panics) if the driver panicked anywhere,
//! even where it caught the panic, if the two walks differ in anything
//! (values, errors, which objects there are), or if a byte the driver's
//! cache holds differs from the file's.
//!
//! Why a differential walk rather than a check inside the read path: it
//! needs no hook in the driver, it judges what a user sees (the values and
//! the errors), and HDF5's reading of the same bytes through its own driver
//! is the oracle for every read at once, wherever a wrong byte would land.
//! The cache's own bytes are checked against the file besides, so that a
//! wrong byte HDF5 happened not to use is found too.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use remfile::hdf5::hdf5_metno as h5lib;
use remfile::hdf5::{self as remote_hdf5, OpenOptions};
use remfile::{RemoteFile, RetryPolicy};

use super::walk::{OPEN_FAILED, walk};
use crate::memory::Served;

/// The largest size served for which the reference walk runs: its copy is
/// a sparse file of that size, which the file system must allow (ext4's
/// limit is 16 TiB). Larger claims are walked through the driver alone.
pub const MAX_REFERENCE_LEN: u64 = 1 << 40;

/// The URL the file is opened at (no request leaves the process).
const URL: &str = "http://memory.invalid/fuzzed.h5";

/// How long the walk waits, after closing, for the fetches the driver
/// started in the background: they only ever read memory.
const BACKGROUND_WAIT: Duration = Duration::from_secs(10);

/// What one input asks for: the bytes, the size to claim, and the driver's
/// options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Input<'a> {
    /// The size the server claims (at least the bytes' length).
    pub len: u64,
    /// Whether the metadata crawl runs.
    pub metadata_prefetch: bool,
    /// Whether runs of chunk reads fetch the following chunks.
    pub chunk_read_ahead: bool,
    /// Whether each dataset's read is preceded by
    /// [`remfile::hdf5::prefetch_hyperslab`] of the same selection.
    pub prefetch_hyperslab: bool,
    /// The remote file's block size.
    pub block_size: u64,
    /// The file's bytes.
    pub file: &'a [u8],
}

/// The sizes an input may claim, beyond its bytes' own: a little more (a
/// truncated file), past 4 GiB (32-bit offsets overflow), 1 TiB, and 2^50
/// bytes (where every length clipped only to the file's size is huge).
fn claimed_len(kind: u8, file_len: u64) -> u64 {
    match kind % 8 {
        0..=3 => file_len,
        4 => file_len + (1 << 20),
        5 => file_len + (1 << 32),
        6 => 1 << 40,
        _ => 1 << 50,
    }
}

/// The block sizes an input may choose: the driver's default, small ones
/// (many blocks per structure) and one that divides nothing evenly.
const BLOCK_SIZES: [u64; 4] = [remote_hdf5::BLOCK_SIZE, 4096, 64 << 10, 12_345];

/// The two bytes before the file in an input: the size kind (see
/// `claimed_len`) and the option bits (metadata prefetch off, chunk
/// read-ahead off, hyperslab prefetch on, and two bits of block size).
pub const HEADER_LEN: usize = 2;

impl Input<'_> {
    /// Reads an input: [`HEADER_LEN`] bytes of choices, then the file.
    pub fn decode(data: &[u8]) -> Option<Input<'_>> {
        let [kind, flags, file @ ..] = data else {
            return None;
        };
        Some(Input {
            len: claimed_len(*kind, file.len() as u64),
            metadata_prefetch: flags & 1 == 0,
            chunk_read_ahead: flags & 2 == 0,
            prefetch_hyperslab: flags & 4 != 0,
            block_size: BLOCK_SIZES[usize::from(flags >> 3 & 3)],
            file,
        })
    }
}

/// Runs the driver over `data` (an [`Input`]) and panics if it panicked,
/// disagreed with HDF5's own driver, or cached a wrong byte.
pub fn hdf5_driver(data: &[u8]) {
    let _ = hdf5_driver_walk(data);
}

/// As [`hdf5_driver`], and returns the walk: a line per object, link and
/// attribute (empty for an input too short to decode).
pub fn hdf5_driver_walk(data: &[u8]) -> Vec<String> {
    let Some(input) = Input::decode(data) else {
        return Vec::new();
    };
    count_panics();
    h5lib::silence_errors(true);
    let before = caught_panics();
    if std::env::var_os(REFERENCE_ONLY).is_some() {
        assert!(
            input.len <= MAX_REFERENCE_LEN,
            "{REFERENCE_ONLY}: the input claims more than the reference walk's sparse copy \
             can be; set its first byte to 6 to claim 1 TiB"
        );
        return walk_local(&input);
    }
    let served = Served::new(input.file, input.len);
    let through_driver = walk_remote(&served, &input);
    assert_eq!(
        caught_panics(),
        before,
        "the driver panicked (and caught it) on this input"
    );
    if input.len <= MAX_REFERENCE_LEN {
        let reference = walk_local(&input);
        if through_driver != reference {
            let diff = first_difference(&through_driver, &reference);
            panic!("the driver's walk differs from HDF5's own: {diff}");
        }
    }
    through_driver
}

/// Set in the environment, the walk is HDF5's own alone (no driver): to
/// tell whether a crash the fuzzer found is HDF5's.
pub const REFERENCE_ONLY: &str = "REMFILE_FUZZ_REFERENCE_ONLY";

/// Where two walks part, for the report.
fn first_difference(ours: &[String], theirs: &[String]) -> String {
    let at = ours
        .iter()
        .zip(theirs)
        .position(|(a, b)| a != b)
        .unwrap_or(ours.len().min(theirs.len()));
    format!(
        "at line {at}: driver {:?}, sec2 {:?} ({} and {} lines)",
        ours.get(at),
        theirs.get(at),
        ours.len(),
        theirs.len()
    )
}

/// Panics seen by the hook, caught or not.
static PANICS: AtomicU64 = AtomicU64::new(0);

/// Chains a hook that counts every panic, in any thread, before the one
/// there was (which prints it, or under libFuzzer aborts).
fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
    });
}

fn caught_panics() -> u64 {
    PANICS.load(Ordering::SeqCst)
}

/// Opens and walks the served file through the driver; then checks the
/// cache's bytes against the file's.
fn walk_remote(served: &Served, input: &Input<'_>) -> Vec<String> {
    let opened = remote_hdf5::builder()
        .agent(served.agent())
        .block_size(input.block_size)
        .cache_capacity(64 << 20)
        .retry_policy(RetryPolicy::never())
        .open(URL);
    let remote = match opened {
        Ok(remote) => remote,
        // Only an empty file is refused before HDF5 sees it; HDF5 refuses
        // that too.
        Err(_) => return vec![OPEN_FAILED.to_owned()],
    };
    assert_eq!(remote.len(), served.len(), "the size the server claimed");
    let options = OpenOptions::new()
        .metadata_prefetch(input.metadata_prefetch)
        .chunk_read_ahead(input.chunk_read_ahead);
    let walk = match options.open(remote.clone()) {
        Ok(file) => walk(&file, input.prefetch_hyperslab),
        Err(_) => vec![OPEN_FAILED.to_owned()],
    };
    assert!(
        remote.wait_for_background_fetches(BACKGROUND_WAIT),
        "background fetches still running {BACKGROUND_WAIT:?} after the walk"
    );
    check_cached_bytes(&remote, served);
    walk
}

/// The bytes the file's cache gives back (all of the file's own bytes and
/// some zeros past them, fetched again where evicted) equal the served
/// ones.
fn check_cached_bytes(remote: &RemoteFile, served: &Served) {
    let end = served.len().min(served.given_len() + (64 << 10));
    let mut pos = 0;
    let mut got = vec![0u8; 1 << 20];
    let mut expected = vec![0u8; 1 << 20];
    while pos < end {
        let n = (end - pos).min(got.len() as u64) as usize;
        remote
            .read_exact_at(pos, &mut got[..n])
            .expect("a read from memory");
        served.copy_at(pos, &mut expected[..n]);
        assert!(
            got[..n] == expected[..n],
            "the cache gave wrong bytes in {pos}..{}",
            pos + n as u64
        );
        pos += n as u64;
    }
}

/// Opens a sparse copy of the input's file with HDF5's `sec2` driver and
/// walks it.
fn walk_local(input: &Input<'_>) -> Vec<String> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mine = crate::per_process(&std::env::temp_dir(), "remfile-fuzz-");
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = PathBuf::from(format!("{}-{n}.h5", mine.display()));
    let copy = (|| {
        let mut f = std::fs::File::create(&path)?;
        f.write_all(input.file)?;
        f.set_len(input.len)
    })();
    copy.expect("a sparse copy of the input in the temporary directory");
    let walked = match h5lib::File::open(&path) {
        Ok(file) => walk(&file, false),
        Err(_) => vec![OPEN_FAILED.to_owned()],
    };
    let _ = std::fs::remove_file(&path);
    walked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_chooses_size_and_options() {
        let data = [7, 0b0001_1101, b'a', b'b'];
        let input = Input::decode(&data).unwrap();
        assert_eq!(input.len, 1 << 50);
        assert!(!input.metadata_prefetch);
        assert!(input.chunk_read_ahead);
        assert!(input.prefetch_hyperslab);
        assert_eq!(input.block_size, BLOCK_SIZES[3]);
        assert_eq!(input.file, b"ab");
        assert_eq!(Input::decode(&[0, 0]).unwrap().len, 0);
        assert_eq!(Input::decode(&[4, 0, 1]).unwrap().len, 1 + (1 << 20));
        assert!(Input::decode(&[0]).is_none());
    }
}
