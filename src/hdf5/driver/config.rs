//! The driver's configuration string, for HDF5 programs that load the driver
//! as a plugin: `H5Pset_driver_by_name(fapl, "remfile", config)` or the
//! `HDF5_DRIVER_CONFIG` environment variable. Parsing is a pure function;
//! the driver opens the remote file with what it says.
//!
//! The string is a list of `key=value` pairs separated by `;` (spaces around
//! them ignored), e.g. `block_size=1MiB;cache_capacity=512MiB;read_timeout=30s`. Sizes take
//! `B`, `KiB`, `MiB`, `GiB`, `TiB` (or `K`, `M`, `G`, `T`: powers of 1024)
//! and `KB`, `MB`, `GB`, `TB` (powers of 1000), in any case, after a whole
//! or decimal number (`1.5GiB`, `512k`); durations `ms`, `s`, `min`, `h`,
//! `d` (`1.5s`); switches `on`, `off`, `true`, `false`, `1`, `0`, `yes`, `no`.
//!
//! Each key is one row of one table ([`KEYS`]): its name (the builder
//! method's it sets) and earlier names, the kind of its value, its default,
//! its help, and how its value reads into a setting. Opening the file those
//! settings describe (a disk cache to open, a CA file to read) is
//! [`builder`](super::builder)'s job.

use std::fmt;
use std::time::Duration;

use crate::{Builder, RemoteFile};

/// How much of the end of the file an HDF5 open fetches beside the
/// superblock.
pub(crate) const OPEN_TAIL: u64 = 1 << 20;

/// The block size of remote HDF5 files.
pub(crate) const BLOCK_SIZE: u64 = 128 << 10;

/// The most connections a remote HDF5 file keeps. The metadata crawl
/// fetches metadata spread among the data as small pieces, one request
/// each, on the connections reads leave free: a session whose writer put
/// each sweep's headers after its data (hundreds of pieces per wave) took
/// 99 rounds with 16, 52 with 32 and 27 with 64. Files whose metadata lies
/// together use a few; a server that limits its clients may need fewer
/// (`connections=` in the plugin's configuration).
pub(crate) const CONNECTIONS: u64 = 64;

/// Whether an HDF5 file opens with the metadata prefetch on
/// (`metadata_prefetch`, [`OpenOptions::metadata_prefetch`](crate::hdf5::OpenOptions::metadata_prefetch)).
pub(crate) const METADATA_PREFETCH: bool = true;

/// Whether an HDF5 file opens with the chunk read-ahead on
/// (`chunk_read_ahead`, [`OpenOptions::chunk_read_ahead`](crate::hdf5::OpenOptions::chunk_read_ahead)).
pub(crate) const CHUNK_READ_AHEAD: bool = true;

/// Whether the driver reports a file's statistics when it closes.
const STATS: bool = false;

/// How the configuration string writes a switch's value.
fn show_switch(on: bool) -> String {
    if on { "on" } else { "off" }.to_owned()
}

/// How the configuration string writes a size: in the largest binary unit
/// that divides it.
fn show_size(bytes: u64) -> String {
    let units = [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")];
    units
        .iter()
        .find(|(shift, _)| bytes != 0 && bytes % (1 << shift) == 0)
        .map_or_else(
            || bytes.to_string(),
            |(shift, unit)| format!("{}{unit}", bytes >> shift),
        )
}

/// How the configuration string writes a duration: in the largest unit
/// that divides it.
fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    let units = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "min"),
        (1000, "s"),
    ];
    units
        .iter()
        .find(|(unit_ms, _)| ms % unit_ms == 0)
        .map_or_else(
            || format!("{ms}ms"),
            |(unit_ms, unit)| format!("{}{unit}", ms / unit_ms),
        )
}

/// The builder remote HDF5 files open with: the crate's defaults, with an
/// [`OPEN_TAIL`], blocks of [`BLOCK_SIZE`] and up to [`CONNECTIONS`]
/// connections.
pub(crate) fn hdf5_builder() -> Builder {
    RemoteFile::builder()
        .open_tail(OPEN_TAIL)
        .block_size(BLOCK_SIZE)
        .max_connections(CONNECTIONS)
}

/// One key of the configuration string.
pub struct Key {
    /// Its name: the builder method's that it sets, where there is one.
    pub name: &'static str,
    /// Other names it answers to (those of earlier versions).
    pub aliases: &'static [&'static str],
    /// The kind of its value.
    pub kind: Kind,
    /// Its value when the string does not set it, read off what the
    /// driver opens files with (`None`: unset, or learnt); see
    /// [`default_value`](Key::default_value).
    default: Option<fn() -> String>,
    /// What it sets.
    pub help: &'static str,
    /// Its value, read; else why not.
    read: fn(&str) -> Result<Setting, &'static str>,
}

/// The kind of a key's value, as the string writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Bytes, with a unit or none: `1MiB`, `512k`, `100`.
    Size,
    /// A whole number.
    Count,
    /// With a unit: `30s`, `250ms`, `5min`.
    Duration,
    /// `on` or `off`.
    Switch,
    /// A filesystem path.
    Path,
    /// Anything without a `;`.
    Text,
}

impl Kind {
    /// Its name: `size`, `count`, `duration`, `switch`, `path`, `text`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Size => "size",
            Kind::Count => "count",
            Kind::Duration => "duration",
            Kind::Switch => "switch",
            Kind::Path => "path",
            Kind::Text => "text",
        }
    }
}

impl Key {
    /// Its value when the string does not set it, as the string would
    /// write it (`None`: unset, or learnt).
    pub fn default_value(&self) -> Option<String> {
        self.default.map(|value| value())
    }

    /// Whether `name` names this key (its name or an alias).
    pub fn is_named(&self, name: &str) -> bool {
        self.name == name || self.aliases.contains(&name)
    }
}

const SIZE: &str = "expected a size such as 1MiB";
const COUNT: &str = "expected a whole number";
const DURATION: &str = "expected a duration such as 30s";
const SWITCH: &str = "expected on or off";
const PATH: &str = "expected a path";
const HEADER: &str = "expected `Name: value`";

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
        aliases: &[],
        kind: Kind::Size,
        default: Some(|| show_size(hdf5_builder().block_size)),
        help: "the block size",
        read: |v| size(v).map(Setting::BlockSize),
    },
    Key {
        name: "cache_capacity",
        aliases: &["cache"],
        kind: Kind::Size,
        default: Some(|| show_size(hdf5_builder().cache_capacity)),
        help: "the capacity of the block cache, which the process's files of one capacity share",
        read: |v| size(v).map(Setting::Cache),
    },
    Key {
        name: "open_tail",
        aliases: &["tail"],
        kind: Kind::Size,
        default: Some(|| show_size(hdf5_builder().open_tail)),
        help: "bytes of the file's end fetched at open",
        read: |v| size(v).map(Setting::Tail),
    },
    Key {
        name: "read_ahead_max",
        aliases: &[],
        kind: Kind::Size,
        default: Some(|| show_size(hdf5_builder().read_ahead_max)),
        help: "the most a sequential stream reads ahead, at most a quarter of the cache",
        read: |v| size(v).map(Setting::ReadAheadMax),
    },
    Key {
        name: "max_concurrent_requests",
        aliases: &["concurrency"],
        kind: Kind::Count,
        default: Some(|| hdf5_builder().max_concurrent_requests.to_string()),
        help: "parallel requests for one read",
        read: |v| count(v).map(Setting::Concurrency),
    },
    Key {
        name: "max_connections",
        aliases: &["connections"],
        kind: Kind::Count,
        default: Some(|| hdf5_builder().max_connections.to_string()),
        help: "the most connections kept",
        read: |v| count(v).map(Setting::Connections),
    },
    Key {
        name: "retries",
        aliases: &[],
        kind: Kind::Count,
        default: Some(|| hdf5_builder().retry.retries().to_string()),
        help: "retries of a failed request",
        read: |v| {
            let n = u32::try_from(count(v)?).map_err(|_| COUNT)?;
            Ok(Setting::Retries(n))
        },
    },
    Key {
        name: "read_timeout",
        aliases: &["timeout"],
        kind: Kind::Duration,
        default: Some(|| show_duration(hdf5_builder().read_timeout)),
        help: "the longest wait for one read, retries included",
        read: |v| duration(v).map(Setting::Timeout),
    },
    Key {
        name: "connect_timeout",
        aliases: &[],
        kind: Kind::Duration,
        default: Some(|| show_duration(hdf5_builder().connect_timeout)),
        help: "the longest wait for a connection",
        read: |v| duration(v).map(Setting::ConnectTimeout),
    },
    Key {
        name: "metadata_prefetch",
        aliases: &[],
        kind: Kind::Switch,
        default: Some(|| show_switch(METADATA_PREFETCH)),
        help: "fetch what metadata points to",
        read: |v| switch(v).map(Setting::MetadataPrefetch),
    },
    Key {
        name: "chunk_read_ahead",
        aliases: &[],
        kind: Kind::Switch,
        default: Some(|| show_switch(CHUNK_READ_AHEAD)),
        help: "read chunks ahead along the chunk index",
        read: |v| switch(v).map(Setting::ChunkReadAhead),
    },
    Key {
        name: "ca_file",
        aliases: &[],
        kind: Kind::Path,
        default: None,
        help: "a PEM file of CA certificates to trust beside the built-in roots",
        read: |v| path(v).map(Setting::CaFile),
    },
    Key {
        name: "https_only",
        aliases: &[],
        kind: Kind::Switch,
        default: Some(|| show_switch(hdf5_builder().https_only)),
        help: "refuse plain http",
        read: |v| switch(v).map(Setting::HttpsOnly),
    },
    Key {
        name: "allow_redirect_to_http",
        aliases: &[],
        kind: Kind::Switch,
        default: Some(|| show_switch(hdf5_builder().allow_redirect_to_http)),
        help: "follow a redirect from https to plain http",
        read: |v| switch(v).map(Setting::AllowRedirectToHttp),
    },
    Key {
        name: "disk_cache",
        aliases: &[],
        kind: Kind::Path,
        default: None,
        help: "a directory for a disk cache shared by runs and processes",
        read: |v| path(v).map(Setting::DiskCache),
    },
    Key {
        name: "disk_capacity",
        aliases: &[],
        kind: Kind::Size,
        default: Some(|| show_size(DISK_CAPACITY)),
        help: "the disk cache's capacity",
        read: |v| size(v).map(Setting::DiskCapacity),
    },
    Key {
        name: "cache_key",
        aliases: &[],
        kind: Kind::Text,
        default: None,
        help: "the name the file goes by in the disk cache, instead of its URL",
        read: |v| Ok(Setting::CacheKey(v.to_owned())),
    },
    Key {
        name: "revalidate_after",
        aliases: &[],
        kind: Kind::Duration,
        default: Some(|| show_duration(hdf5_builder().revalidate_after)),
        help: "how long a version on disk is trusted without asking",
        read: |v| duration(v).map(Setting::RevalidateAfter),
    },
    Key {
        name: "immutable",
        aliases: &[],
        kind: Kind::Switch,
        default: Some(|| show_switch(hdf5_builder().immutable)),
        help: "the object at the URL never changes (a content-addressed blob, a versioned key): a version on disk is trusted for good, so a warm open sends no request; a changed object would be read stale",
        read: |v| switch(v).map(Setting::Immutable),
    },
    Key {
        name: "header",
        aliases: &[],
        kind: Kind::Text,
        default: None,
        help: "a header for every request to the file's own server, `Name: value` such as `Authorization: Bearer …`; repeat the key for more; never logged",
        read: |v| {
            let (name, value) = v.split_once(':').ok_or(HEADER)?;
            let (name, value) = (name.trim(), value.trim());
            if name.is_empty() {
                return Err(HEADER);
            }
            Ok(Setting::Header(name.to_owned(), Secret(value.to_owned())))
        },
    },
    Key {
        name: "s3_region",
        aliases: &[],
        kind: Kind::Text,
        default: None,
        help: "the region of an s3:// URL's bucket, else AWS_REGION, the profile's, or the one the bucket names",
        read: |v| Ok(Setting::S3Region(v.to_owned())),
    },
    Key {
        name: "s3_endpoint",
        aliases: &[],
        kind: Kind::Text,
        default: None,
        help: "an S3-compatible service's URL for s3:// URLs, such as MinIO, Ceph or R2, else AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or AWS",
        read: |v| Ok(Setting::S3Endpoint(v.to_owned())),
    },
    Key {
        name: "s3_profile",
        aliases: &[],
        kind: Kind::Text,
        default: None,
        help: "the AWS profile s3:// URLs take keys and region from, in place of AWS_PROFILE",
        read: |v| Ok(Setting::S3Profile(v.to_owned())),
    },
    Key {
        name: "s3_path_style",
        aliases: &[],
        kind: Kind::Switch,
        default: None,
        help: "path-style S3 requests, host/bucket/key; without it, for custom endpoints and dotted bucket names only",
        read: |v| switch(v).map(Setting::S3PathStyle),
    },
    Key {
        name: "s3_anonymous",
        aliases: &[],
        kind: Kind::Switch,
        default: Some(|| show_switch(hdf5_builder().s3.anonymous)),
        help: "unsigned S3 requests, without looking for credentials, for public buckets",
        read: |v| switch(v).map(Setting::S3Anonymous),
    },
    Key {
        name: "s3_requester_pays",
        aliases: &[],
        kind: Kind::Switch,
        default: Some(|| show_switch(hdf5_builder().s3.requester_pays)),
        help: "pay for the requests to a requester-pays bucket",
        read: |v| switch(v).map(Setting::S3RequesterPays),
    },
    Key {
        name: "s3_access_key_id",
        aliases: &[],
        kind: Kind::Text,
        default: None,
        help: "an AWS access key id for s3:// URLs, with s3_secret_access_key, in place of the credential chain",
        read: |v| Ok(Setting::S3AccessKeyId(Secret(v.to_owned()))),
    },
    Key {
        name: "s3_secret_access_key",
        aliases: &[],
        kind: Kind::Text,
        default: None,
        help: "the secret of s3_access_key_id",
        read: |v| Ok(Setting::S3SecretAccessKey(Secret(v.to_owned()))),
    },
    Key {
        name: "s3_session_token",
        aliases: &[],
        kind: Kind::Text,
        default: None,
        help: "the session token of temporary keys given by s3_access_key_id",
        read: |v| Ok(Setting::S3SessionToken(Secret(v.to_owned()))),
    },
    Key {
        name: "stats",
        aliases: &[],
        kind: Kind::Switch,
        default: Some(|| show_switch(STATS)),
        help: "print requests, round trips and bytes to standard error at close, as REMFILE_STATS=1 does",
        read: |v| switch(v).map(Setting::Stats),
    },
];

/// A configuration string, parsed: its settings in order (a later one of a
/// key wins). The default, no settings, is what `parse("")` gives.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// The settings, in the order given.
    pub(crate) settings: Vec<Setting>,
    /// The key each setting was given by, as written (a name or an alias).
    keys: Vec<&'static str>,
}

impl Config {
    /// Each setting with the key it was given by.
    pub(crate) fn keyed(&self) -> impl Iterator<Item = (&'static str, &Setting)> {
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
        .unwrap_or(METADATA_PREFETCH)
    }

    /// `chunk_read_ahead` (default on).
    pub fn chunk_read_ahead(&self) -> bool {
        self.last(|s| match s {
            Setting::ChunkReadAhead(on) => Some(*on),
            _ => None,
        })
        .unwrap_or(CHUNK_READ_AHEAD)
    }

    /// `stats` (default [`STATS`]).
    pub fn stats(&self) -> bool {
        self.last(|s| match s {
            Setting::Stats(on) => Some(*on),
            _ => None,
        })
        .unwrap_or(STATS)
    }

    /// `disk_capacity` (default [`DISK_CAPACITY`]).
    pub(crate) fn disk_capacity(&self) -> u64 {
        self.last(|s| match s {
            Setting::DiskCapacity(n) => Some(*n),
            _ => None,
        })
        .unwrap_or(DISK_CAPACITY)
    }
}

/// One setting.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Setting {
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
    /// `immutable`.
    Immutable(bool),
    /// `stats`.
    Stats(bool),
    /// `header`: its name and value.
    Header(String, Secret),
    /// `s3_region`.
    S3Region(String),
    /// `s3_endpoint`.
    S3Endpoint(String),
    /// `s3_profile`.
    S3Profile(String),
    /// `s3_path_style`.
    S3PathStyle(bool),
    /// `s3_anonymous`.
    S3Anonymous(bool),
    /// `s3_requester_pays`.
    S3RequesterPays(bool),
    /// `s3_access_key_id`.
    S3AccessKeyId(Secret),
    /// `s3_secret_access_key`.
    S3SecretAccessKey(Secret),
    /// `s3_session_token`.
    S3SessionToken(Secret),
}

/// A value that is never shown: `Debug` hides it, and a configuration error
/// does not quote it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(pub(crate) String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(hidden)")
    }
}

/// Keys whose values are secrets.
const SECRET_KEYS: [&str; 4] = [
    "header",
    "s3_access_key_id",
    "s3_secret_access_key",
    "s3_session_token",
];

/// The disk cache's capacity when the configuration names none.
pub(crate) const DISK_CAPACITY: u64 = 10 << 30;

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
        // What is not a key is not quoted: it may be the rest of a header
        // value cut at a `;`.
        let (key, value) = pair.split_once('=').ok_or_else(|| ConfigError {
            key: if KEYS.iter().any(|k| k.is_named(pair)) {
                pair.to_owned()
            } else {
                "(text that is no key)".to_owned()
            },
            reason: "expected key=value".into(),
        })?;
        let (key, value) = (key.trim(), value.trim());
        let Some(row) = KEYS.iter().find(|k| k.is_named(key)) else {
            let known: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
            return Err(ConfigError {
                key: shown_key(key),
                reason: format!("unknown key (known: {})", known.join(", ")),
            });
        };
        let setting = (row.read)(value).map_err(|reason| ConfigError {
            key: key.to_owned(),
            reason: if SECRET_KEYS.contains(&row.name) {
                reason.to_owned()
            } else {
                format!("{reason}, not `{value}`")
            },
        })?;
        out.settings.push(setting);
        // As written: an error about it names the key the string used.
        let given = std::iter::once(row.name)
            .chain(row.aliases.iter().copied())
            .find(|name| *name == key)
            .unwrap_or(row.name);
        out.keys.push(given);
    }
    Ok(out)
}

/// `key` as an error shows it: as it is if it could be a key's name, else
/// not at all.
fn shown_key(key: &str) -> String {
    let name_like = (1..=40).contains(&key.len())
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if name_like {
        key.to_owned()
    } else {
        "(text that is no key)".to_owned()
    }
}

/// A number (a decimal fraction allowed) and the unit after it, spaces
/// between allowed, the unit in lower case: the number times the unit, in
/// whole units of `unit_of`'s result (rounded to the nearest), if it fits.
fn scaled(value: &str, unit_of: impl Fn(&str) -> Option<u64>) -> Option<u64> {
    let value = value.trim();
    let at = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let (number, unit) = value.split_at(at);
    let unit = unit_of(&unit.trim().to_ascii_lowercase())?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    // Digits past the 18th cannot change a result in whole units.
    let fraction = &fraction[..fraction.len().min(18)];
    let scaled_fraction = if fraction.is_empty() {
        0
    } else {
        let digits: u128 = fraction.parse().ok()?;
        let denominator = 10u128.pow(fraction.len() as u32);
        (digits * u128::from(unit) + denominator / 2) / denominator
    };
    let total = whole.checked_mul(u128::from(unit))? + scaled_fraction;
    u64::try_from(total).ok()
}

/// A size: bytes, or a number with a unit, in any case: `k`, `kib`, `m`,
/// `mib`, `g`, `gib`, `t`, `tib` are powers of 1024; `kb`, `mb`, `gb`, `tb`
/// powers of 1000 (`1.5GiB`, `512k`, `1 MB`).
fn parse_size(value: &str) -> Option<u64> {
    scaled(value, |unit| {
        Some(match unit {
            "" | "b" => 1,
            "k" | "kib" => 1 << 10,
            "m" | "mib" => 1 << 20,
            "g" | "gib" => 1 << 30,
            "t" | "tib" => 1 << 40,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            "tb" => 1_000_000_000_000,
            _ => return None,
        })
    })
}

/// A duration: a number with a unit, in any case: `ms`, `s`, `min`, `h`,
/// `d` (`1.5s`, `250ms`, `2min`).
fn parse_duration(value: &str) -> Option<Duration> {
    let millis = scaled(value, |unit| {
        Some(match unit {
            "ms" => 1,
            "s" => 1_000,
            "min" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return None,
        })
    })?;
    Some(Duration::from_millis(millis))
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
    fn every_key_and_alias_names_one_key_and_an_alias_reads_as_its_key() {
        let names: Vec<&str> = KEYS
            .iter()
            .flat_map(|k| std::iter::once(k.name).chain(k.aliases.iter().copied()))
            .collect();
        let mut distinct = names.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), names.len(), "a name used twice");
        assert_eq!(
            parse("cache=1GiB;timeout=30s").unwrap().settings,
            parse("cache_capacity=1GiB;read_timeout=30s")
                .unwrap()
                .settings
        );
        // Named in errors as written.
        assert_eq!(
            parse("cache=1GiB").unwrap().keyed().next().unwrap().0,
            "cache"
        );
    }

    #[test]
    fn sizes_and_durations_take_any_case_and_decimals() {
        for (text, bytes) in [
            ("1gb", 1_000_000_000),
            ("512k", 512 << 10),
            ("512K", 512 << 10),
            ("1.5GiB", 3 << 29),
            ("1 MB", 1_000_000),
            ("0.5kib", 512),
            (".5K", 512),
            ("2TiB", 2 << 40),
            ("100", 100),
            ("1.0000000000000000000001k", 1024),
        ] {
            assert_eq!(parse_size(text), Some(bytes), "{text}");
        }
        for bad in [
            "",
            ".",
            "k",
            "1.2.3k",
            "1 xb",
            "-1k",
            "1e3",
            "99999999999999999999999TiB",
        ] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250MS"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("2min"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("30"), None, "a unit is needed");
    }

    #[test]
    fn defaults_are_written_as_a_person_would_and_read_back() {
        let default = |name: &str| {
            KEYS.iter()
                .find(|k| k.name == name)
                .and_then(Key::default_value)
        };
        assert_eq!(default("block_size").as_deref(), Some("128KiB"));
        assert_eq!(default("cache_capacity").as_deref(), Some("256MiB"));
        assert_eq!(default("disk_capacity").as_deref(), Some("10GiB"));
        assert_eq!(default("read_timeout").as_deref(), Some("5min"));
        assert_eq!(default("connect_timeout").as_deref(), Some("10s"));
        assert_eq!(default("revalidate_after").as_deref(), Some("0s"));
        assert_eq!(default("retries").as_deref(), Some("5"));
        assert_eq!(default("stats").as_deref(), Some("off"));
        assert_eq!(default("ca_file"), None);
        for bytes in [0, 1, 1000, 1024, 1536, 3 << 20, 5 << 40, u64::MAX] {
            assert_eq!(parse_size(&show_size(bytes)), Some(bytes), "{bytes}");
        }
        for ms in [0, 1, 999, 1500, 60_000, 90_000, 3_600_000, 86_400_000 * 2] {
            let d = Duration::from_millis(ms);
            assert_eq!(parse_duration(&show_duration(d)), Some(d), "{ms} ms");
        }
    }

    #[test]
    fn each_default_the_help_names_is_the_builders() {
        // The builder of no settings: the defaults, with the process's
        // cache of the default capacity.
        let baseline = format!(
            "{:?}",
            super::super::source::builder(&parse("").unwrap()).unwrap()
        );
        for key in KEYS {
            let Some(default) = key.default_value() else {
                continue;
            };
            let config = parse(&format!("{}={default}", key.name))
                .unwrap_or_else(|e| panic!("{}: {e}", key.name));
            let Ok(applied) = super::super::source::builder(&config) else {
                continue;
            };
            assert_eq!(format!("{applied:?}"), baseline, "{}={default}", key.name);
        }
    }

    #[test]
    fn headers_and_s3_keys_are_read_and_never_shown() {
        let c = parse(
            "header=Authorization: Bearer tok=en;header=X-Api-Key:k1;s3_region=eu-west-3;\
             s3_anonymous=on;s3_access_key_id=AKIAHIDDEN;s3_secret_access_key=very-secret",
        )
        .unwrap();
        let header = |name: &str, value: &str| Setting::Header(name.into(), Secret(value.into()));
        assert!(
            c.settings
                .contains(&header("Authorization", "Bearer tok=en"))
        );
        assert!(c.settings.contains(&header("X-Api-Key", "k1")));
        assert!(c.settings.contains(&Setting::S3Region("eu-west-3".into())));
        let shown = format!("{c:?}");
        for secret in ["tok=en", "k1", "AKIAHIDDEN", "very-secret"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        let e = parse("header=Cookie: a=1; secretpart").unwrap_err();
        assert!(!e.to_string().contains("secretpart"), "{e}");
        let e = parse("header=Cookie: a=1; b=secretcookie").unwrap_err();
        assert!(!e.to_string().contains("secretcookie"), "{e}");
        let e = parse("header=no colon secret").unwrap_err();
        assert_eq!(e.key, "header");
        assert!(!e.to_string().contains("secret"), "{e}");
        let b = super::super::source::builder(&c).unwrap();
        assert!(!format!("{b:?}").contains("very-secret"));
        let half = parse("s3_access_key_id=AKIAONLY").unwrap();
        assert!(
            super::super::source::check(&half).is_err(),
            "a key id needs its secret"
        );
        super::super::source::check(&c).unwrap();
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
