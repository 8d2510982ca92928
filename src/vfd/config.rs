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
//!
//! Each key is one row of one table: its name, its help, and how its value
//! reads into a [`Setting`]. Opening the file those settings describe (a
//! disk cache to open, a CA file to read) is [`super::source`]'s job.

use std::fmt;
use std::time::Duration;

use crate::{Builder, RemoteFile};

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

/// One key of the configuration string.
pub struct Key {
    /// Its name.
    pub name: &'static str,
    /// What it sets, and the kind of its value (size, duration, switch,
    /// count, path) first in parentheses.
    pub help: &'static str,
    /// Its value, read; else why not.
    read: fn(&str) -> Result<Setting, &'static str>,
}

const SIZE: &str = "expected a size such as 1MiB";
const COUNT: &str = "expected a whole number";
const DURATION: &str = "expected a duration such as 30s";
const SWITCH: &str = "expected on or off";
const PATH: &str = "expected a path";

fn size(value: &str) -> Result<u64, &'static str> {
    parse_size(value).ok_or(SIZE)
}

fn count(value: &str) -> Result<u64, &'static str> {
    value.parse().map_err(|_| COUNT)
}

fn duration(value: &str) -> Result<Duration, &'static str> {
    parse_duration(value).ok_or(DURATION)
}

fn switch(value: &str) -> Result<bool, &'static str> {
    parse_switch(value).ok_or(SWITCH)
}

/// A path: never empty (that would be the current directory, wherever the
/// program happens to run).
fn path(value: &str) -> Result<String, &'static str> {
    (!value.is_empty()).then(|| value.to_owned()).ok_or(PATH)
}

/// Every key, in the order the documentation lists them.
pub const KEYS: &[Key] = &[
    Key {
        name: "block_size",
        help: "the block size (size; default 128KiB)",
        read: |v| size(v).map(Setting::BlockSize),
    },
    Key {
        name: "cache",
        help: "the block cache's capacity (size)",
        read: |v| size(v).map(Setting::Cache),
    },
    Key {
        name: "tail",
        help: "bytes of the file's end fetched at open (size; default 1MiB)",
        read: |v| size(v).map(Setting::Tail),
    },
    Key {
        name: "read_ahead_max",
        help: "the most a sequential stream reads ahead (size)",
        read: |v| size(v).map(Setting::ReadAheadMax),
    },
    Key {
        name: "concurrency",
        help: "parallel requests for one read (count)",
        read: |v| count(v).map(Setting::Concurrency),
    },
    Key {
        name: "connections",
        help: "the most connections kept (count; default 64)",
        read: |v| count(v).map(Setting::Connections),
    },
    Key {
        name: "retries",
        help: "retries of a failed request (count)",
        read: |v| {
            let n = u32::try_from(count(v)?).map_err(|_| COUNT)?;
            Ok(Setting::Retries(n))
        },
    },
    Key {
        name: "timeout",
        help: "the longest wait for one read (duration)",
        read: |v| duration(v).map(Setting::Timeout),
    },
    Key {
        name: "connect_timeout",
        help: "the longest wait for a connection (duration)",
        read: |v| duration(v).map(Setting::ConnectTimeout),
    },
    Key {
        name: "metadata_prefetch",
        help: "fetch what metadata points to (switch; default on)",
        read: |v| switch(v).map(Setting::MetadataPrefetch),
    },
    Key {
        name: "chunk_read_ahead",
        help: "read chunks ahead along the chunk index (switch; default on)",
        read: |v| switch(v).map(Setting::ChunkReadAhead),
    },
    Key {
        name: "ca_file",
        help: "a PEM file of CA certificates to trust beside the built-in roots (path)",
        read: |v| path(v).map(Setting::CaFile),
    },
    Key {
        name: "https_only",
        help: "refuse plain http (switch; default off)",
        read: |v| switch(v).map(Setting::HttpsOnly),
    },
    Key {
        name: "allow_redirect_to_http",
        help: "follow a redirect from https to plain http (switch; default off)",
        read: |v| switch(v).map(Setting::AllowRedirectToHttp),
    },
    Key {
        name: "disk_cache",
        help: "a directory for a disk cache shared by runs and processes (path)",
        read: |v| path(v).map(Setting::DiskCache),
    },
    Key {
        name: "disk_capacity",
        help: "the disk cache's capacity (size; default 10GiB)",
        read: |v| size(v).map(Setting::DiskCapacity),
    },
    Key {
        name: "cache_key",
        help: "the name the file goes by in the disk cache, instead of its URL (text)",
        read: |v| Ok(Setting::CacheKey(v.to_owned())),
    },
    Key {
        name: "revalidate_after",
        help: "how long a version on disk is trusted without asking (duration; default 0s)",
        read: |v| duration(v).map(Setting::RevalidateAfter),
    },
    Key {
        name: "stats",
        help: "print requests, round trips and bytes to standard error at close (switch; or REMFILE_STATS=1)",
        read: |v| switch(v).map(Setting::Stats),
    },
];

/// A configuration string, parsed: its settings in order (a later one of a
/// key wins). The default, no settings, is what `parse("")` gives.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// The settings, in the order given.
    pub settings: Vec<Setting>,
    /// The key each setting was given by.
    keys: Vec<&'static str>,
}

impl Config {
    /// Each setting with the key it was given by.
    pub fn keyed(&self) -> impl Iterator<Item = (&'static str, &Setting)> {
        self.keys.iter().copied().zip(&self.settings)
    }

    /// The last setting `pick` finds, if any.
    fn last<T>(&self, pick: impl Fn(&Setting) -> Option<T>) -> Option<T> {
        self.settings.iter().rev().find_map(pick)
    }

    /// `metadata_prefetch` (default on).
    pub fn metadata_prefetch(&self) -> bool {
        self.last(|s| match s {
            Setting::MetadataPrefetch(on) => Some(*on),
            _ => None,
        })
        .unwrap_or(true)
    }

    /// `chunk_read_ahead` (default on).
    pub fn chunk_read_ahead(&self) -> bool {
        self.last(|s| match s {
            Setting::ChunkReadAhead(on) => Some(*on),
            _ => None,
        })
        .unwrap_or(true)
    }

    /// `stats` (default off).
    pub fn stats(&self) -> bool {
        self.last(|s| match s {
            Setting::Stats(on) => Some(*on),
            _ => None,
        })
        .unwrap_or(false)
    }

    /// `disk_capacity` (default [`DISK_CAPACITY`]).
    pub fn disk_capacity(&self) -> u64 {
        self.last(|s| match s {
            Setting::DiskCapacity(n) => Some(*n),
            _ => None,
        })
        .unwrap_or(DISK_CAPACITY)
    }
}

/// One setting.
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
    /// `metadata_prefetch`.
    MetadataPrefetch(bool),
    /// `chunk_read_ahead`.
    ChunkReadAhead(bool),
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
    /// `stats`.
    Stats(bool),
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

/// Parses a configuration string (see the module's documentation): no I/O.
pub fn parse(config: &str) -> Result<Config, ConfigError> {
    let mut out = Config::default();
    for pair in config.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').ok_or_else(|| ConfigError {
            key: pair.to_owned(),
            reason: "expected key=value".into(),
        })?;
        let (key, value) = (key.trim(), value.trim());
        let Some(row) = KEYS.iter().find(|k| k.name == key) else {
            let known: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
            return Err(ConfigError {
                key: key.to_owned(),
                reason: format!("unknown key (known: {})", known.join(", ")),
            });
        };
        let setting = (row.read)(value).map_err(|reason| ConfigError {
            key: key.to_owned(),
            reason: format!("{reason}, not `{value}`"),
        })?;
        out.settings.push(setting);
        out.keys.push(row.name);
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

pub(crate) fn parse_switch(value: &str) -> Option<bool> {
    match value {
        "on" | "true" | "1" | "yes" => Some(true),
        "off" | "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_string_sets_what_it_names() {
        let c = parse(
            " block_size=1MiB; cache=2GiB;timeout=30s ;retries=2;stats=on;chunk_read_ahead=off;",
        )
        .unwrap();
        assert_eq!(
            c.settings,
            [
                Setting::BlockSize(1 << 20),
                Setting::Cache(2 << 30),
                Setting::Timeout(Duration::from_secs(30)),
                Setting::Retries(2),
                Setting::Stats(true),
                Setting::ChunkReadAhead(false),
            ]
        );
        assert!(c.stats() && c.metadata_prefetch() && !c.chunk_read_ahead());
        assert_eq!(parse("").unwrap(), parse(" ; ").unwrap());
        assert_eq!(
            parse("tail=64KB").unwrap().settings,
            [Setting::Tail(64_000)]
        );
        assert_eq!(
            parse("connect_timeout=250ms").unwrap().settings,
            [Setting::ConnectTimeout(Duration::from_millis(250))]
        );
        assert_eq!(
            parse("disk_capacity=1GiB").unwrap().disk_capacity(),
            1 << 30
        );
        assert!(
            !parse("stats=on;stats=off").unwrap().stats(),
            "the last one wins"
        );
    }

    #[test]
    fn the_defaults_are_those_of_an_empty_string() {
        let (empty, default) = (parse("").unwrap(), Config::default());
        assert_eq!(empty, default);
        assert!(default.metadata_prefetch() && default.chunk_read_ahead() && !default.stats());
        assert_eq!(default.disk_capacity(), DISK_CAPACITY);
    }

    #[test]
    fn every_key_is_documented_with_its_kind() {
        // The Python package reads a value's kind from the help: the first
        // word in its one pair of parentheses, at its end.
        for key in KEYS {
            let (_, tail) = key.help.split_once('(').unwrap();
            let kind = tail.split([';', ')']).next().unwrap();
            assert!(
                ["size", "count", "duration", "switch", "path", "text"].contains(&kind)
                    && key.help.ends_with(')')
                    && !tail.contains('('),
                "{}: {}",
                key.name,
                key.help
            );
        }
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
    }
}
