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
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use crate::extension::KeyPart;
use crate::file::RemoteFile;
use crate::http::RetryPolicy;
use crate::options::Builder;
use crate::s3::S3Options;

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

/// One key of the configuration string: the one declaration of an option,
/// from which the driver's parse, the builder it opens files with, Python's
/// keyword argument and every default shown come.
pub struct Key {
    /// Its name: the builder method's that it sets, where there is one.
    pub name: &'static str,
    /// Other names it answers to (those of earlier versions).
    pub aliases: &'static [&'static str],
    /// What it sets.
    pub help: &'static str,
    /// What it sets, and the kind of its value.
    sets: Sets,
    /// Whether its value is a secret, which no message or `Debug` shows.
    secret: bool,
    /// Where the documentation lists it.
    pub group: Group,
}

/// The groups the documentation lists the keys in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Group {
    /// Blocks, caches and read-ahead in memory.
    Blocks,
    /// Connections, time limits and what the server is trusted with.
    Network,
    /// What the HDF5 driver fetches ahead and reports.
    Hdf5,
    /// The disk cache shared by runs and processes.
    Disk,
    /// `s3://` URLs.
    S3,
}

impl Group {
    /// Its title, as the documentation heads it.
    pub fn title(self) -> &'static str {
        match self {
            Group::Blocks => "Blocks and memory",
            Group::Network => "Network and security",
            Group::Hdf5 => "HDF5",
            Group::Disk => "Disk cache",
            Group::S3 => "S3",
        }
    }
}

/// What a key sets, by the kind of its value.
#[derive(Clone, Copy)]
enum Sets {
    Size(Field<u64>),
    Count(Field<u64>),
    Duration(Field<Duration>),
    Switch(Field<bool>),
    Text(Field<String>),
    /// `Name: value`: the builder's setter of one header.
    Header(fn(Builder, String, String) -> Builder),
    /// A path to something the file opens with (I/O, done when the file
    /// opens, never by [`parse`]).
    Path(fn(Builder, &str, &Config) -> Result<Builder, String>),
}

/// A setting of the builder: its setter and, if it has one that does not
/// depend on the file, its default, read off [`hdf5_builder`] (or one of
/// the driver's own constants for a setting only the driver reads: its
/// setter then leaves the builder as it is).
struct Field<T> {
    set: fn(Builder, T) -> Builder,
    default: Option<fn(&Builder) -> T>,
}

// Function pointers are `Copy` whatever `T` is (a derive would ask `T: Copy`).
impl<T> Clone for Field<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Field<T> {}

const fn field<T>(set: fn(Builder, T) -> Builder, default: fn(&Builder) -> T) -> Field<T> {
    Field {
        set,
        default: Some(default),
    }
}

const fn no_default<T>(set: fn(Builder, T) -> Builder) -> Field<T> {
    Field { set, default: None }
}

/// The setter of a setting the driver reads itself.
fn driver_reads<T>(b: Builder, _: T) -> Builder {
    b
}

/// The kind of a key's value, as the string writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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
    /// `Name: value`.
    Header,
}

impl Kind {
    /// Its name: `size`, `count`, `duration`, `switch`, `path`, `text`,
    /// `header`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Size => "size",
            Kind::Count => "count",
            Kind::Duration => "duration",
            Kind::Switch => "switch",
            Kind::Path => "path",
            Kind::Text => "text",
            Kind::Header => "header",
        }
    }
}

impl Key {
    /// A key of no alias whose value is no secret.
    const fn new(name: &'static str, sets: Sets, help: &'static str) -> Key {
        Key {
            name,
            aliases: &[],
            help,
            sets,
            secret: false,
            group: Group::Blocks,
        }
    }

    /// The key, listed in `group`.
    const fn group(mut self, group: Group) -> Key {
        self.group = group;
        self
    }

    /// The key, also answering to `aliases`.
    const fn or(mut self, aliases: &'static [&'static str]) -> Key {
        self.aliases = aliases;
        self
    }

    /// The key, its value a secret.
    const fn secret(mut self) -> Key {
        self.secret = true;
        self
    }

    /// The kind of its value.
    pub fn kind(&self) -> Kind {
        match self.sets {
            Sets::Size(_) => Kind::Size,
            Sets::Count(_) => Kind::Count,
            Sets::Duration(_) => Kind::Duration,
            Sets::Switch(_) => Kind::Switch,
            Sets::Text(_) => Kind::Text,
            Sets::Header(_) => Kind::Header,
            Sets::Path(_) => Kind::Path,
        }
    }

    /// Its value when the string does not set it, as the string would
    /// write it (`None`: unset, or learnt).
    pub fn default_value(&self) -> Option<String> {
        self.default().map(|value| value.shown(self.kind()))
    }

    /// Its value when the string does not set it.
    fn default(&self) -> Option<Value> {
        let b = hdf5_builder();
        match self.sets {
            Sets::Size(f) | Sets::Count(f) => f.default.map(|get| Value::Number(get(&b))),
            Sets::Duration(f) => f.default.map(|get| Value::Duration(get(&b))),
            Sets::Switch(f) => f.default.map(|get| Value::Switch(get(&b))),
            Sets::Text(f) => f.default.map(|get| Value::Text(get(&b))),
            Sets::Header(_) | Sets::Path(_) => None,
        }
    }

    /// Whether its value is a secret, which no message shows.
    pub fn is_secret(&self) -> bool {
        self.secret
    }

    /// Whether `name` names this key (its name or an alias).
    pub fn is_named(&self, name: &str) -> bool {
        self.name == name || self.aliases.contains(&name)
    }

    /// `text` read as this key's value; else why not.
    fn read(&self, text: &str) -> Result<Value, &'static str> {
        match self.sets {
            Sets::Size(_) => parse_size(text)
                .map(Value::Number)
                .ok_or("expected a size such as 1MiB"),
            // No count of the builder's goes past `u32::MAX`.
            Sets::Count(_) => text
                .parse::<u32>()
                .map(|n| Value::Number(n.into()))
                .map_err(|_| "expected a whole number up to 4294967295"),
            Sets::Duration(_) => parse_duration(text)
                .map(Value::Duration)
                .ok_or("expected a duration such as 30s"),
            Sets::Switch(_) => parse_switch(text)
                .map(Value::Switch)
                .ok_or("expected on or off"),
            Sets::Text(_) => Ok(Value::Text(text.to_owned())),
            // Never empty: that would be the current directory, wherever
            // the program happens to run.
            Sets::Path(_) if text.is_empty() => Err("expected a path"),
            Sets::Path(_) => Ok(Value::Text(text.to_owned())),
            Sets::Header(_) => {
                let (name, value) = text.split_once(':').ok_or(HEADER)?;
                let (name, value) = (name.trim(), value.trim());
                if name.is_empty() {
                    return Err(HEADER);
                }
                Ok(Value::Header(name.to_owned(), value.to_owned()))
            }
        }
    }
}

const HEADER: &str = "expected `Name: value`";

/// The retry policy of `n` retries (a count read is at most `u32::MAX`).
fn retries(b: Builder, n: u64) -> Builder {
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    b.retry_policy(RetryPolicy::default().max_retries(n))
}

/// `b` with a byte weight of `n` (one past the largest accepted if `n` is
/// larger still: the builder's check says so).
fn byte_weight(b: Builder, n: u64) -> Builder {
    b.byte_weight(u32::try_from(n).unwrap_or(u32::MAX))
}

/// `b` with its S3 options changed by `change`.
fn with_s3(b: Builder, change: impl FnOnce(S3Options) -> S3Options) -> Builder {
    let options = change(b.s3.clone());
    b.s3(options)
}

/// `b` with the disk cache at `dir` (of `config`'s `disk_capacity`). A
/// cache is never worth a failed open: one that cannot be opened, or is
/// refused (another user could write it), is left out, and the user told
/// why, once.
fn open_disk_cache(b: Builder, dir: &str, config: &Config) -> Result<Builder, String> {
    let capacity = config.number("disk_capacity");
    Ok(match crate::disk::DiskCache::open(dir, capacity) {
        Ok(disk) => b.disk_cache(disk),
        Err(e) => {
            without_disk_cache(dir, &e);
            b
        }
    })
}

/// Says, once per process, that the disk cache `dir` is not used and why.
fn without_disk_cache(dir: &str, error: &std::io::Error) {
    static SAID: AtomicBool = AtomicBool::new(false);
    let line = format!("remfile: disk cache {dir} not used ({error}); files are read without it");
    if !SAID.swap(true, Relaxed) {
        super::report::report(tracing::Level::WARN, &line);
    } else {
        tracing::warn!("{line}");
    }
}

/// `b` trusting the CA certificates of the PEM file at `path`.
fn read_ca_file(b: Builder, path: &str, _: &Config) -> Result<Builder, String> {
    let pem = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    Ok(b.add_root_certificates(pem))
}

/// Every key, in the order the documentation lists them (by group).
pub const KEYS: &[Key] = &[
    Key::new(
        "block_size",
        Sets::Size(field(Builder::block_size, |b| b.block_size)),
        "the block size",
    )
    .group(Group::Blocks),
    Key::new(
        "cache_capacity",
        Sets::Size(field(Builder::cache_capacity, |b| b.cache_capacity)),
        "the capacity of the block cache, which the process's files of one capacity share",
    )
    .or(&["cache"])
    .group(Group::Blocks),
    Key::new(
        "open_tail",
        Sets::Size(field(Builder::open_tail, |b| b.open_tail)),
        "bytes of the file's end fetched at open",
    )
    .or(&["tail"])
    .group(Group::Blocks),
    Key::new(
        "read_ahead_max",
        Sets::Size(field(Builder::read_ahead_max, |b| b.read_ahead_max)),
        "the most a sequential stream reads ahead, at most a quarter of the cache",
    )
    .group(Group::Blocks),
    Key::new(
        "max_concurrent_requests",
        Sets::Count(field(Builder::max_concurrent_requests, |b| {
            b.max_concurrent_requests
        })),
        "parallel requests for one read",
    )
    .or(&["concurrency"])
    .group(Group::Network),
    Key::new(
        "max_connections",
        Sets::Count(field(Builder::max_connections, |b| b.max_connections)),
        "the most connections kept",
    )
    .or(&["connections"])
    .group(Group::Network),
    Key::new(
        "byte_weight",
        Sets::Count(field(byte_weight, |b| u64::from(b.byte_weight))),
        "how many times its transfer time a byte fetched ahead of need weighs against a round trip (more where bytes are billed)",
    )
    .group(Group::Network),
    Key::new(
        "retries",
        Sets::Count(field(retries, |b| u64::from(b.retry.retries()))),
        "retries of a failed request",
    )
    .group(Group::Network),
    Key::new(
        "read_timeout",
        Sets::Duration(field(Builder::read_timeout, |b| b.read_timeout)),
        "the longest wait for one read, retries included",
    )
    .or(&["timeout"])
    .group(Group::Network),
    Key::new(
        "connect_timeout",
        Sets::Duration(field(Builder::connect_timeout, |b| b.connect_timeout)),
        "the longest wait for a connection",
    )
    .group(Group::Network),
    Key::new(
        "ca_file",
        Sets::Path(read_ca_file),
        "a PEM file of CA certificates to trust beside the built-in roots",
    )
    .group(Group::Network),
    Key::new(
        "https_only",
        Sets::Switch(field(Builder::https_only, |b| b.https_only)),
        "refuse plain http",
    )
    .group(Group::Network),
    Key::new(
        "allow_redirect_to_http",
        Sets::Switch(field(Builder::allow_redirect_to_http, |b| {
            b.allow_redirect_to_http
        })),
        "follow a redirect from https to plain http",
    )
    .group(Group::Network),
    Key::new(
        "header",
        Sets::Header(|b, name, value| b.header(name, value)),
        "a header for every request to the file's own server, `Name: value` such as `Authorization: Bearer …`; repeat the key for more; never logged",
    )
    .secret()
    .group(Group::Network),
    Key::new(
        "metadata_prefetch",
        Sets::Switch(field(driver_reads, |_| METADATA_PREFETCH)),
        "fetch what metadata points to",
    )
    .group(Group::Hdf5),
    Key::new(
        "chunk_read_ahead",
        Sets::Switch(field(driver_reads, |_| CHUNK_READ_AHEAD)),
        "read chunks ahead along the chunk index",
    )
    .group(Group::Hdf5),
    Key::new(
        "stats",
        Sets::Switch(field(driver_reads, |_| STATS)),
        "print requests, round trips and bytes to standard error at close, as REMFILE_STATS=1 does",
    )
    .group(Group::Hdf5),
    Key::new(
        "trace",
        Sets::Switch(field(Builder::trace_requests, |b| b.trace_requests)),
        "keep each request and HDF5's reads, for an account of the open round by round (explain)",
    )
    .group(Group::Hdf5),
    Key::new(
        "disk_cache",
        Sets::Path(open_disk_cache),
        "a directory for a disk cache shared by runs and processes",
    )
    .group(Group::Disk),
    Key::new(
        "disk_capacity",
        Sets::Size(field(driver_reads, |_| DISK_CAPACITY)),
        "the disk cache's capacity",
    )
    .group(Group::Disk),
    Key::new(
        "cache_key",
        Sets::Text(no_default(|b, key| b.cache_key(key))),
        "the name the file goes by in the disk cache, instead of its URL",
    )
    .group(Group::Disk),
    Key::new(
        "revalidate_after",
        Sets::Duration(field(Builder::revalidate_after, |b| b.revalidate_after)),
        "how long a version on disk is trusted without asking",
    )
    .group(Group::Disk),
    Key::new(
        "immutable",
        Sets::Switch(field(Builder::immutable, |b| b.immutable)),
        "the object at the URL never changes (a content-addressed blob, a versioned key): a version on disk is trusted for good, so a warm open sends no request; a changed object would be read stale",
    )
    .group(Group::Disk),
    Key::new(
        "s3_region",
        Sets::Text(no_default(|b, v| with_s3(b, |s| s.region(v)))),
        "the region of an s3:// URL's bucket, else AWS_REGION, the profile's, or the one the bucket names",
    )
    .group(Group::S3),
    Key::new(
        "s3_endpoint",
        Sets::Text(no_default(|b, v| with_s3(b, |s| s.endpoint(v)))),
        "an S3-compatible service's URL for s3:// URLs, such as MinIO, Ceph or R2, else AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or AWS",
    )
    .group(Group::S3),
    Key::new(
        "s3_profile",
        Sets::Text(no_default(|b, v| with_s3(b, |s| s.profile(v)))),
        "the AWS profile s3:// URLs take keys and region from, in place of AWS_PROFILE",
    )
    .group(Group::S3),
    Key::new(
        "s3_path_style",
        Sets::Switch(no_default(|b, on| with_s3(b, |s| s.path_style(on)))),
        "path-style S3 requests, host/bucket/key; without it, for custom endpoints and dotted bucket names only",
    )
    .group(Group::S3),
    Key::new(
        "s3_anonymous",
        Sets::Switch(field(
            |b, on| with_s3(b, |s| s.anonymous(on)),
            |b| b.s3.anonymous,
        )),
        "unsigned S3 requests, without looking for credentials, for public buckets",
    )
    .group(Group::S3),
    Key::new(
        "s3_requester_pays",
        Sets::Switch(field(
            |b, on| with_s3(b, |s| s.requester_pays(on)),
            |b| b.s3.requester_pays,
        )),
        "pay for the requests to a requester-pays bucket",
    )
    .group(Group::S3),
    Key::new(
        "s3_access_key_id",
        Sets::Text(no_default(|b, v| {
            with_s3(b, |s| s.key_part(KeyPart::Id, v))
        })),
        "an AWS access key id for s3:// URLs, with s3_secret_access_key, in place of the credential chain",
    )
    .secret()
    .group(Group::S3),
    Key::new(
        "s3_secret_access_key",
        Sets::Text(no_default(|b, v| {
            with_s3(b, |s| s.key_part(KeyPart::Secret, v))
        })),
        "the secret of s3_access_key_id",
    )
    .secret()
    .group(Group::S3),
    Key::new(
        "s3_session_token",
        Sets::Text(no_default(|b, v| {
            with_s3(b, |s| s.key_part(KeyPart::Token, v))
        })),
        "the session token of temporary keys given by s3_access_key_id",
    )
    .secret()
    .group(Group::S3),
];

/// The key named `name` (not an alias).
fn key(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// A value read, of a key's kind.
#[derive(Clone, PartialEq)]
enum Value {
    Number(u64),
    Duration(Duration),
    Switch(bool),
    Text(String),
    Header(String, String),
}

impl Value {
    /// As the configuration string writes a value of `kind`.
    fn shown(&self, kind: Kind) -> String {
        match self {
            Value::Number(n) if kind == Kind::Size => show_size(*n),
            Value::Number(n) => n.to_string(),
            Value::Duration(d) => show_duration(*d),
            Value::Switch(on) => show_switch(*on),
            Value::Text(text) => text.clone(),
            Value::Header(name, value) => format!("{name}: {value}"),
        }
    }
}

/// One setting: a key and its value.
#[derive(Clone)]
pub(crate) struct Setting {
    key: &'static Key,
    /// The name the string gave the key by (its name or an alias), for
    /// errors about it.
    given_as: &'static str,
    value: Value,
}

impl Setting {
    /// The key's name as the string gave it.
    pub(crate) fn given_as(&self) -> &'static str {
        self.given_as
    }

    /// Whether its value names something opened when the file is.
    pub(crate) fn opens_something(&self) -> bool {
        matches!(self.key.sets, Sets::Path(_))
    }

    /// Whether it is one part of a set of S3 keys (checked with the others).
    pub(crate) fn is_s3_key_part(&self) -> bool {
        self.key.name.starts_with("s3_") && self.key.secret
    }

    /// `b` with this setting; `config` for what it depends on. Files
    /// opened (`Kind::Path`) are opened here.
    pub(crate) fn apply(&self, b: Builder, config: &Config) -> Result<Builder, ConfigError> {
        let v = self.value.clone();
        Ok(match (self.key.sets, v) {
            (Sets::Size(f) | Sets::Count(f), Value::Number(n)) => (f.set)(b, n),
            (Sets::Duration(f), Value::Duration(d)) => (f.set)(b, d),
            (Sets::Switch(f), Value::Switch(on)) => (f.set)(b, on),
            (Sets::Text(f), Value::Text(text)) => (f.set)(b, text),
            (Sets::Header(set), Value::Header(name, value)) => set(b, name, value),
            (Sets::Path(open), Value::Text(path)) => {
                open(b, &path, config).map_err(|reason| ConfigError {
                    key: self.given_as.to_owned(),
                    reason,
                })?
            }
            // `Key::read` gives each kind its own value: never met.
            _ => {
                debug_assert!(false, "`{}`: a value of another kind", self.key.name);
                b
            }
        })
    }
}

/// Equal when the key and the value are (whichever of its names gave it).
impl PartialEq for Setting {
    fn eq(&self, other: &Setting) -> bool {
        self.key.name == other.key.name && self.value == other.value
    }
}

impl fmt::Debug for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.secret {
            write!(f, "{}=(hidden)", self.key.name)
        } else {
            write!(f, "{}={}", self.key.name, self.value.shown(self.key.kind()))
        }
    }
}

/// A configuration string, parsed: its settings in order (a later one of a
/// key wins). The default, no settings, is what `parse("")` gives.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// The settings, in the order given.
    pub(crate) settings: Vec<Setting>,
}

impl Config {
    /// The value of the key `name`: the last setting of it, else its
    /// default.
    fn value(&self, name: &str) -> Option<Value> {
        let set = self.settings.iter().rev().find(|s| s.key.name == name);
        set.map(|s| s.value.clone())
            .or_else(|| key(name).and_then(Key::default))
    }

    /// Whether `other` sets what this does, whatever the order and the
    /// names given: the last setting of each key (every `header`), compared
    /// by value, secrets included.
    pub(crate) fn same_effect(&self, other: &Config) -> bool {
        let (mine, theirs) = (self.in_effect(), other.in_effect());
        mine.len() == theirs.len()
            && mine.iter().all(|s| theirs.contains(s))
            && theirs.iter().all(|s| mine.contains(s))
    }

    /// The settings that take effect: the last of each key, every header.
    fn in_effect(&self) -> Vec<&Setting> {
        let mut seen: Vec<&str> = Vec::new();
        let mut out = Vec::new();
        for setting in self.settings.iter().rev() {
            let name = setting.key.name;
            if matches!(setting.key.sets, Sets::Header(_)) || !seen.contains(&name) {
                seen.push(name);
                out.push(setting);
            }
        }
        out
    }

    /// The switch `name`'s value (off if there is no such switch).
    fn switch(&self, name: &str) -> bool {
        matches!(self.value(name), Some(Value::Switch(true)))
    }

    /// The size or count `name`'s value (0 if there is none).
    fn number(&self, name: &str) -> u64 {
        match self.value(name) {
            Some(Value::Number(n)) => n,
            _ => 0,
        }
    }

    /// `metadata_prefetch` (default on).
    pub fn metadata_prefetch(&self) -> bool {
        self.switch("metadata_prefetch")
    }

    /// `chunk_read_ahead` (default on).
    pub fn chunk_read_ahead(&self) -> bool {
        self.switch("chunk_read_ahead")
    }

    /// `stats` (default off).
    pub fn stats(&self) -> bool {
        self.switch("stats")
    }

    /// `trace` (default off).
    pub fn trace(&self) -> bool {
        self.switch("trace")
    }
}

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
        let (key, text) = pair.split_once('=').ok_or_else(|| ConfigError {
            key: if KEYS.iter().any(|k| k.is_named(pair)) {
                pair.to_owned()
            } else {
                "(text that is no key)".to_owned()
            },
            reason: "expected key=value".into(),
        })?;
        let (key, text) = (key.trim(), text.trim());
        let Some(row) = KEYS.iter().find(|k| k.is_named(key)) else {
            let known: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
            return Err(ConfigError {
                key: shown_key(key),
                reason: format!("unknown key (known: {})", known.join(", ")),
            });
        };
        let value = row.read(text).map_err(|reason| ConfigError {
            key: key.to_owned(),
            reason: if row.secret {
                reason.to_owned()
            } else {
                format!("{reason}, not `{text}`")
            },
        })?;
        // As written: an error about it names the key the string used.
        let given_as = std::iter::once(row.name)
            .chain(row.aliases.iter().copied())
            .find(|name| *name == key)
            .unwrap_or(row.name);
        out.settings.push(Setting {
            key: row,
            given_as,
            value,
        });
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
            format!("{:?}", c.settings),
            "[block_size=1MiB, cache_capacity=2GiB, read_timeout=30s, retries=2, stats=on, \
             chunk_read_ahead=off]"
        );
        assert!(c.stats() && c.metadata_prefetch() && !c.chunk_read_ahead());
        assert_eq!(parse("").unwrap(), parse(" ; ").unwrap());
        let shown = |text| format!("{:?}", parse(text).unwrap().settings);
        assert_eq!(shown("tail=64KB"), "[open_tail=64000]");
        assert_eq!(shown("connect_timeout=250ms"), "[connect_timeout=250ms]");
        assert_eq!(
            parse("disk_capacity=1GiB").unwrap().number("disk_capacity"),
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
        assert_eq!(default.number("disk_capacity"), DISK_CAPACITY);
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
        assert_eq!(parse("cache=1GiB").unwrap().settings[0].given_as(), "cache");
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
            super::super::setup::builder(&parse("").unwrap()).unwrap()
        );
        for key in KEYS {
            let Some(default) = key.default_value() else {
                continue;
            };
            let config = parse(&format!("{}={default}", key.name))
                .unwrap_or_else(|e| panic!("{}: {e}", key.name));
            let Ok(applied) = super::super::setup::builder(&config) else {
                continue;
            };
            assert_eq!(format!("{applied:?}"), baseline, "{}={default}", key.name);
        }
    }

    #[test]
    fn the_plugins_page_lists_every_key_with_its_default() {
        let page = include_str!("../../../docs/plugin.md");
        let rows: Vec<&str> = page.lines().filter(|l| l.starts_with("| `")).collect();
        for key in KEYS {
            let row = rows
                .iter()
                .find(|row| row.contains(&format!("`{}`", key.name)))
                .unwrap_or_else(|| panic!("docs/plugin.md has no row for `{}`", key.name));
            if let Some(default) = key.default_value() {
                assert!(
                    row.contains(&default),
                    "`{}`'s default {default}: {row}",
                    key.name
                );
            }
            for alias in key.aliases {
                assert!(row.contains(&format!("(or `{alias}`)")), "{alias}: {row}");
            }
        }
    }

    #[test]
    fn the_keys_of_a_group_are_listed_together() {
        let mut seen: Vec<Group> = Vec::new();
        for key in KEYS {
            if seen.last() != Some(&key.group) {
                assert!(
                    !seen.contains(&key.group),
                    "{} apart from its group",
                    key.name
                );
                seen.push(key.group);
            }
        }
    }

    #[test]
    fn every_key_changes_what_it_names() {
        let shown = |config: &Config| {
            let b = super::super::setup::apply(config, hdf5_builder()).unwrap();
            format!("{b:?}")
        };
        let baseline = shown(&Config::default());
        let driver_reads = [
            "metadata_prefetch",
            "chunk_read_ahead",
            "stats",
            "disk_capacity",
        ];
        for key in KEYS {
            let other = match key.default() {
                Some(Value::Switch(on)) => show_switch(!on),
                Some(Value::Number(n)) => (n / 2).max(3).to_string(),
                Some(Value::Duration(d)) => format!("{}ms", d.as_millis() / 2 + 7),
                _ => match key.kind() {
                    Kind::Switch => "on".to_owned(),
                    Kind::Header => "X-Check: 1".to_owned(),
                    Kind::Path => continue,
                    _ => "eu-west-3".to_owned(),
                },
            };
            let config = parse(&format!("{}={other}", key.name)).unwrap();
            if driver_reads.contains(&key.name) {
                assert_eq!(shown(&config), baseline, "{}", key.name);
                assert!(config.value(key.name) != key.default(), "{}", key.name);
            } else {
                assert_ne!(shown(&config), baseline, "{}={other}", key.name);
            }
        }
    }

    #[test]
    fn headers_and_s3_keys_are_read_and_never_shown() {
        let c = parse(
            "header=Authorization: Bearer tok=en;header=X-Api-Key:k1;s3_region=eu-west-3;\
             s3_anonymous=on;s3_access_key_id=AKIAHIDDEN;s3_secret_access_key=very-secret",
        )
        .unwrap();
        let header = |name: &str, value: &str| Setting {
            key: key("header").unwrap(),
            given_as: "header",
            value: Value::Header(name.into(), value.into()),
        };
        assert!(
            c.settings
                .contains(&header("Authorization", "Bearer tok=en"))
        );
        assert!(c.settings.contains(&header("X-Api-Key", "k1")));
        assert!(format!("{:?}", c.settings).contains("s3_region=eu-west-3"));
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
        let b = super::super::setup::builder(&c).unwrap();
        assert!(!format!("{b:?}").contains("very-secret"));
        let half = parse("s3_access_key_id=AKIAONLY").unwrap();
        assert!(
            super::super::setup::check(&half).is_err(),
            "a key id needs its secret"
        );
        super::super::setup::check(&c).unwrap();
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
