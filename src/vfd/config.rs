//! The driver's configuration string, for HDF5 programs that load the driver
//! as a plugin: `H5Pset_driver_by_name(fapl, "remfile", config)` or the
//! `HDF5_DRIVER_CONFIG` environment variable. Parsing is a pure function;
//! the driver opens the remote file with what it says.
//!
//! The string is a list of `key=value` pairs separated by `;` (spaces around
//! them ignored), e.g. `block_size=1MiB;cache=512MiB;timeout=30s`. Sizes take
//! `B`, `KiB`, `MiB`, `GiB` (or `K`, `M`, `G`, powers of 1024, and `KB`,
//! `MB`, `GB`, powers of 1000); durations `ms`, `s`, `min`, `h`, `d`; switches `on`,
//! `off`, `true`, `false`, `1`, `0`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::driver::Source;
use crate::{Builder, RemoteFile, RetryPolicy};

/// How much of the end of the file an HDF5 open fetches beside the
/// superblock.
pub const OPEN_TAIL: u64 = 1 << 20;

/// The block size of remote HDF5 files.
pub const BLOCK_SIZE: u64 = 128 << 10;

/// The most connections a remote HDF5 file keeps. The metadata crawl
/// fetches metadata spread among the data as small pieces, one request
/// each, on the connections reads leave free: a session whose writer put
/// each sweep's headers after its data (hundreds of pieces per wave) took
/// 99 rounds with 16, 52 with 32 and 27 with 64. Files whose metadata lies
/// together use a few; a server that limits its clients may need fewer
/// (`connections=` in the plugin's configuration).
pub const CONNECTIONS: u64 = 64;

/// The builder remote HDF5 files open with: the crate's defaults, with an
/// [`OPEN_TAIL`], blocks of [`BLOCK_SIZE`] and up to [`CONNECTIONS`]
/// connections.
pub fn hdf5_builder() -> Builder {
    RemoteFile::builder()
        .open_tail(OPEN_TAIL)
        .block_size(BLOCK_SIZE)
        .max_connections(CONNECTIONS)
}

/// The keys a configuration string may hold, with what each sets.
pub const KEYS: &[(&str, &str)] = &[
    ("block_size", "the block size (size; default 128KiB)"),
    ("cache", "the block cache's capacity (size)"),
    (
        "tail",
        "bytes of the file's end fetched at open (size; default 1MiB)",
    ),
    (
        "read_ahead_max",
        "the most a sequential stream reads ahead (size)",
    ),
    ("concurrency", "parallel requests for one read (count)"),
    (
        "connections",
        "the most connections kept (count; default 64)",
    ),
    ("retries", "retries of a failed request (count)"),
    ("timeout", "the longest wait for one read (duration)"),
    (
        "connect_timeout",
        "the longest wait for a connection (duration)",
    ),
    (
        "metadata_prefetch",
        "fetch what metadata points to (switch; default on)",
    ),
    (
        "chunk_read_ahead",
        "read chunks ahead along the chunk index (switch; default on)",
    ),
    (
        "ca_file",
        "a PEM file of CA certificates to trust beside the built-in roots",
    ),
    ("https_only", "refuse plain http (switch; default off)"),
    (
        "allow_redirect_to_http",
        "follow a redirect from https to plain http (switch; default off)",
    ),
    (
        "disk_cache",
        "a directory for a disk cache shared by runs and processes (path)",
    ),
    (
        "disk_capacity",
        "the disk cache's capacity (size; default 10GiB)",
    ),
    (
        "cache_key",
        "the name the file goes by in the disk cache, instead of its URL",
    ),
    (
        "revalidate_after",
        "how long a version on disk is trusted without asking (duration; default 0s)",
    ),
    (
        "stats",
        "print requests, round trips and bytes to standard error at close (switch; or REMFILE_STATS=1)",
    ),
];

/// A configuration string, parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// `(key, value)` settings of the remote file, in order.
    pub remote: Vec<Setting>,
    /// `metadata_prefetch`.
    pub metadata_prefetch: bool,
    /// `chunk_read_ahead`.
    pub chunk_read_ahead: bool,
    /// `stats`.
    pub stats: bool,
}

/// One setting of the remote file.
#[derive(Debug, Clone, PartialEq)]
pub enum Setting {
    /// `block_size`.
    BlockSize(u64),
    /// `cache`.
    Cache(u64),
    /// `tail`.
    Tail(u64),
    /// `read_ahead_max`.
    ReadAheadMax(u64),
    /// `concurrency`.
    Concurrency(u64),
    /// `connections`.
    Connections(u64),
    /// `retries`.
    Retries(u32),
    /// `timeout`.
    Timeout(Duration),
    /// `connect_timeout`.
    ConnectTimeout(Duration),
    /// `ca_file`.
    CaFile(String),
    /// `https_only`.
    HttpsOnly(bool),
    /// `allow_redirect_to_http`.
    AllowRedirectToHttp(bool),
    /// `disk_cache`.
    DiskCache(String),
    /// `disk_capacity`.
    DiskCapacity(u64),
    /// `cache_key`.
    CacheKey(String),
    /// `revalidate_after`.
    RevalidateAfter(Duration),
}

/// The disk cache's capacity when the configuration names none.
pub const DISK_CAPACITY: u64 = 10 << 30;

/// What is wrong with a configuration string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The key whose value is wrong, or the unknown key.
    pub key: String,
    /// Why.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "remfile driver configuration: `{}`: {}",
            self.key, self.reason
        )
    }
}

impl std::error::Error for ConfigError {}

/// Parses a configuration string (see the module's documentation).
pub fn parse(config: &str) -> Result<Config, ConfigError> {
    let mut out = Config {
        metadata_prefetch: true,
        chunk_read_ahead: true,
        ..Config::default()
    };
    for pair in config.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').ok_or_else(|| ConfigError {
            key: pair.to_owned(),
            reason: "expected key=value".into(),
        })?;
        let (key, value) = (key.trim(), value.trim());
        let wrong = |reason: &str| ConfigError {
            key: key.to_owned(),
            reason: format!("{reason}, not `{value}`"),
        };
        let size = || parse_size(value).ok_or_else(|| wrong("expected a size such as 1MiB"));
        let count = || {
            value
                .parse::<u64>()
                .map_err(|_| wrong("expected a whole number"))
        };
        let duration =
            || parse_duration(value).ok_or_else(|| wrong("expected a duration such as 30s"));
        let switch = || parse_switch(value).ok_or_else(|| wrong("expected on or off"));
        let path = || {
            // An empty path would be the current directory, wherever the
            // program happens to run.
            (!value.is_empty())
                .then(|| value.to_owned())
                .ok_or_else(|| wrong("expected a path"))
        };
        let setting = match key {
            "block_size" => Setting::BlockSize(size()?),
            "cache" => Setting::Cache(size()?),
            "tail" => Setting::Tail(size()?),
            "read_ahead_max" => Setting::ReadAheadMax(size()?),
            "concurrency" => Setting::Concurrency(count()?),
            "connections" => Setting::Connections(count()?),
            "retries" => Setting::Retries(
                u32::try_from(count()?).map_err(|_| wrong("expected a whole number"))?,
            ),
            "timeout" => Setting::Timeout(duration()?),
            "connect_timeout" => Setting::ConnectTimeout(duration()?),
            "ca_file" => Setting::CaFile(path()?),
            "https_only" => Setting::HttpsOnly(switch()?),
            "allow_redirect_to_http" => Setting::AllowRedirectToHttp(switch()?),
            "disk_cache" => Setting::DiskCache(path()?),
            "disk_capacity" => Setting::DiskCapacity(size()?),
            "cache_key" => Setting::CacheKey(value.to_owned()),
            "revalidate_after" => Setting::RevalidateAfter(duration()?),
            "metadata_prefetch" => {
                out.metadata_prefetch = switch()?;
                continue;
            }
            "chunk_read_ahead" => {
                out.chunk_read_ahead = switch()?;
                continue;
            }
            "stats" => {
                out.stats = switch()?;
                continue;
            }
            _ => {
                let known: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
                return Err(ConfigError {
                    key: key.to_owned(),
                    reason: format!("unknown key (known: {})", known.join(", ")),
                });
            }
        };
        out.remote.push(setting);
    }
    Ok(out)
}

/// A whole number and the unit after it (spaces between allowed).
fn number_and_unit(value: &str) -> Option<(u64, &str)> {
    let at = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (number, unit) = value.split_at(at);
    Some((number.parse().ok()?, unit.trim()))
}

fn parse_size(value: &str) -> Option<u64> {
    let (n, unit) = number_and_unit(value)?;
    let unit_bytes: u64 = match unit {
        "" | "B" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(unit_bytes)
}

/// Says, once per process, that the disk cache `dir` is not used and why.
fn without_disk_cache(dir: &str, error: &std::io::Error) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    tracing::warn!(dir, %error, "disk cache not used");
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!("remfile: disk cache {dir} not used ({error}); files are read without it");
    }
}

fn parse_duration(value: &str) -> Option<Duration> {
    let (n, unit) = number_and_unit(value)?;
    let seconds: u64 = match unit {
        "ms" => return Some(Duration::from_millis(n)),
        "s" => 1,
        "min" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return None,
    };
    Some(Duration::from_secs(n.checked_mul(seconds)?))
}

fn parse_switch(value: &str) -> Option<bool> {
    match value {
        "on" | "true" | "1" | "yes" => Some(true),
        "off" | "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

impl Config {
    /// The builder these settings describe, from [`hdf5_builder`]. A
    /// `ca_file` that cannot be read is an error naming it; a `disk_cache`
    /// that cannot be opened, or is refused (another user could write it),
    /// is left out, with a message on standard error once per process.
    pub fn builder(&self) -> Result<Builder, ConfigError> {
        self.apply(hdf5_builder())
    }

    /// `b` with these settings applied (as [`builder`](Config::builder) does
    /// to [`hdf5_builder`]): for remote files read other than through HDF5.
    pub fn apply(&self, mut b: Builder) -> Result<Builder, ConfigError> {
        let capacity = self
            .remote
            .iter()
            .find_map(|s| match s {
                Setting::DiskCapacity(n) => Some(*n),
                _ => None,
            })
            .unwrap_or(DISK_CAPACITY);
        for setting in &self.remote {
            b = match setting.clone() {
                Setting::BlockSize(n) => b.block_size(n),
                Setting::Cache(n) => b.cache_capacity(n),
                Setting::Tail(n) => b.open_tail(n),
                Setting::ReadAheadMax(n) => b.read_ahead_max(n),
                Setting::Concurrency(n) => b.max_concurrent_requests(n),
                Setting::Connections(n) => b.max_connections(n),
                Setting::Retries(n) => b.retry_policy(RetryPolicy::default().max_retries(n)),
                Setting::Timeout(d) => b.read_timeout(d),
                Setting::ConnectTimeout(d) => b.connect_timeout(d),
                Setting::HttpsOnly(yes) => b.https_only(yes),
                Setting::AllowRedirectToHttp(yes) => b.allow_redirect_to_http(yes),
                Setting::DiskCache(dir) => match crate::DiskCache::open(&dir, capacity) {
                    Ok(disk) => b.disk_cache(disk),
                    Err(e) => {
                        // A cache is never worth a failed open: the file is
                        // read without it, and the user told why, once.
                        without_disk_cache(&dir, &e);
                        b
                    }
                },
                Setting::DiskCapacity(_) => b,
                Setting::CacheKey(key) => b.cache_key(key),
                Setting::RevalidateAfter(d) => b.revalidate_after(d),
                Setting::CaFile(path) => {
                    let pem = std::fs::read(&path).map_err(|e| ConfigError {
                        key: "ca_file".into(),
                        reason: format!("cannot read {path}: {e}"),
                    })?;
                    b.add_root_certificates(pem)
                }
            };
        }
        Ok(b)
    }
}

/// Opens the remote file at `url` as `config` says, for the driver. The
/// error is a message for HDF5's error stack: the bad key, or why the open
/// failed (status, timeout…).
pub(crate) fn open_source(url: &str, config: &str) -> Result<Arc<Source>, String> {
    let config = parse(config).map_err(|e| e.to_string())?;
    if !is_http(url) {
        // A local path (HDF5_DRIVER=remfile sends every open here).
        return Err(format!(
            "the remfile driver reads http:// and https:// URLs, not `{url}`: \
             open local files with another driver (in h5py, driver=\"sec2\")"
        ));
    }
    let file = config
        .builder()
        .map_err(|e| e.to_string())?
        .open(url)
        .map_err(|e| format!("cannot open the remote file: {e}"))?;
    let source = Source::new(file, config.metadata_prefetch, config.chunk_read_ahead);
    let from_env = std::env::var("REMFILE_STATS").is_ok_and(|v| parse_switch(&v) == Some(true));
    if config.stats || from_env {
        source.report_at_close();
    }
    Ok(source)
}

/// Whether `name` is an `http://` or `https://` URL.
fn is_http(name: &str) -> bool {
    let lower = name.get(..8).unwrap_or(name).to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_path_is_refused_with_a_hint() {
        assert!(is_http("https://example.com/f.nwb") && is_http("HTTP://x"));
        assert!(!is_http("/data/f.nwb") && !is_http("s3://bucket/key") && !is_http("http"));
        let e = open_source("/data/f.nwb", "").err().unwrap();
        assert!(e.contains("/data/f.nwb") && e.contains("sec2"), "{e}");
    }

    #[test]
    fn a_configuration_string_sets_what_it_names() {
        let c = parse(
            " block_size=1MiB; cache=2GiB;timeout=30s ;retries=2;stats=on;chunk_read_ahead=off;",
        )
        .unwrap();
        assert_eq!(
            c.remote,
            [
                Setting::BlockSize(1 << 20),
                Setting::Cache(2 << 30),
                Setting::Timeout(Duration::from_secs(30)),
                Setting::Retries(2),
            ]
        );
        assert!(c.stats && c.metadata_prefetch && !c.chunk_read_ahead);
        assert_eq!(parse("").unwrap(), parse(" ; ").unwrap());
        assert_eq!(parse("tail=64KB").unwrap().remote, [Setting::Tail(64_000)]);
        assert_eq!(
            parse("connect_timeout=250ms").unwrap().remote,
            [Setting::ConnectTimeout(Duration::from_millis(250))]
        );
        assert!(parse("block_size=4096").unwrap().builder().is_ok());
        let dir = std::env::temp_dir().join(format!("remfile-config-{}", std::process::id()));
        let c = parse(&format!(
            "disk_cache={};disk_capacity=1GiB;cache_key=asset-1;revalidate_after=1d",
            dir.display()
        ))
        .unwrap();
        assert!(
            c.remote
                .contains(&Setting::RevalidateAfter(Duration::from_secs(86_400)))
        );
        assert!(c.builder().unwrap().disk_cache.is_some());
        assert!(dir.join("blocks").is_dir(), "the disk cache opened");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn a_disk_cache_refused_is_left_out_and_the_file_opens() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("remfile-config-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let c = parse(&format!("disk_cache={}", dir.display())).unwrap();
        assert!(c.builder().unwrap().disk_cache.is_none());
        assert!(!dir.join("blocks").exists(), "nothing made in it");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_absurd_duration_is_refused_not_a_panic() {
        let Err(e) = open_source("http://127.0.0.1:9/x", "timeout=9223372036854775807s") else {
            panic!("opened");
        };
        assert!(e.contains("read_timeout"), "{e}");
    }

    #[test]
    fn a_bad_configuration_string_names_the_key() {
        for (config, key) in [
            ("blocksize=1MiB", "blocksize"),
            ("block_size=1XB", "block_size"),
            ("timeout=30", "timeout"),
            ("stats=maybe", "stats"),
            ("cache", "cache"),
            ("retries=99999999999", "retries"),
            ("cache=99999999999GiB", "cache"),
            ("disk_cache=", "disk_cache"),
            ("ca_file=", "ca_file"),
        ] {
            let e = parse(config).unwrap_err();
            assert_eq!(e.key, key, "{config}: {e}");
            assert!(e.to_string().contains(key), "{e}");
        }
        let e = parse("ca_file=/nonexistent/ca.pem")
            .unwrap()
            .builder()
            .unwrap_err();
        assert_eq!(e.key, "ca_file");
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    }
}
