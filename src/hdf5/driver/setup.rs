//! What a driver configuration makes before a file is read: the remote
//! file's [`Builder`] with its settings, checked without opening anything,
//! and the prefetch a file's first crawl fills.

use std::sync::Arc;

use crate::file::RemoteFile;
use crate::hdf5::pieces;
use crate::options::Builder;
use crate::sync::Mutex;

use super::config::{self, Config, ConfigError, Setting};
use super::prefetch::Prefetcher;

/// The builder `config` describes: the HDF5 defaults (blocks of 128 KiB, a
/// tail of 1 MiB at open, up to 64 connections), with its settings.
pub fn builder(config: &Config) -> Result<Builder, ConfigError> {
    let b = apply(config, config::hdf5_builder())?;
    // Files of one capacity share their cache: the process's memory stays
    // within one budget however many are open.
    let shared = crate::hdf5::driver::caches::of_capacity(b.cache_capacity);
    Ok(b.cache(shared))
}

/// `b` with `config`'s settings applied: for remote files read other than
/// through HDF5. A `ca_file` that cannot be read is an error naming it; a
/// `disk_cache` that cannot be opened, or is refused (another user could
/// write it), is left out, with a message on standard error once per
/// process.
pub fn apply(config: &Config, b: Builder) -> Result<Builder, ConfigError> {
    config
        .settings
        .iter()
        .try_fold(b, |b, setting| setting.apply(b, config))
}

/// Checks that every value of `config` is in range for the builder (a
/// block size of 0, 300 connections or a timeout of 40 days are refused
/// there), naming the key of the first that is not; reads no file and opens
/// nothing (`ca_file` and `disk_cache` are checked when used).
pub fn check(config: &Config) -> Result<(), ConfigError> {
    for setting in config.settings.iter().filter(|s| !s.opens_something()) {
        // The parts of a set of S3 keys are checked together.
        let together: Vec<&Setting> = if setting.is_s3_key_part() {
            config
                .settings
                .iter()
                .filter(|s| s.is_s3_key_part())
                .collect()
        } else {
            vec![setting]
        };
        let b = together
            .into_iter()
            .try_fold(config::hdf5_builder(), |b, s| s.apply(b, config))?;
        if let Err(e) = b.validate() {
            // The builder names its own option ("max_connections must be
            // ..."); the error names the key, so only the rule stays.
            let message = e.to_string();
            let rule = message
                .find(" must ")
                .map_or(&message[..], |at| &message[at + 1..]);
            return Err(ConfigError {
                key: setting.given_as().to_owned(),
                reason: rule.to_owned(),
            });
        }
    }
    Ok(())
}

/// A prefetch of `file` (if `metadata` or `chunks`), for its first crawl.
pub(crate) fn new_prefetch(
    file: &RemoteFile,
    metadata: bool,
    chunks: bool,
) -> Option<Arc<Mutex<Prefetcher>>> {
    (metadata || chunks).then(|| {
        let mut prefetch = Prefetcher::new(metadata, chunks);
        // What an earlier run's crawl guessed, kept on disk, counts as
        // guessed by this one: a warm run guesses no further than the cold
        // one did.
        prefetch.fetched(pieces::found_at_open(file.extension()));
        Arc::new(Mutex::new(prefetch))
    })
}
