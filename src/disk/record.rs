//! Version records: for each remote file (by its name on disk), the version
//! seen last and when, so that a warm open can trust it for a while and a
//! changed file's old blocks are dropped.

use std::fs;
use std::io::Read;
use std::path::PathBuf;
use std::time::SystemTime;

use super::{DiskCache, fnv1a, private};

/// No record this crate writes is longer (a URL is at most some kilobytes).
const MAX_RECORD_LEN: u64 = 1 << 20;

/// The name a file goes by on disk: its URL without query, fragment and
/// credentials, or the builder's key.
pub(crate) fn name(url: &url::Url, key: Option<&str>) -> String {
    match key {
        Some(k) => format!("key {k}"),
        None => {
            let mut bare = url.clone();
            bare.set_query(None);
            bare.set_fragment(None);
            let _ = bare.set_password(None);
            let _ = bare.set_username("");
            format!("url {bare}")
        }
    }
}

/// The identity of a file version on disk: its [`name`], the validator,
/// the size. `None` without a validator to tell versions apart.
pub(crate) fn identity(
    url: &url::Url,
    key: Option<&str>,
    strong_etag: Option<&str>,
    last_modified: Option<&str>,
    size: u64,
) -> Option<String> {
    let validator = strong_etag
        .map(|e| format!("etag {e}"))
        .or_else(|| last_modified.map(|m| format!("modified {m}")))?;
    Some(format!("{}\n{validator}\nsize {size}", name(url, key)))
}

/// The version of a file seen last, as [`DiskCache::recall`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Known {
    /// Its identity text (see [`identity`]).
    pub identity: String,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    pub size: u64,
    /// When it was last confirmed.
    pub seen: SystemTime,
}

impl Known {
    /// Parses an identity text written for `name`.
    fn parse(name: &str, identity: &str, seen: SystemTime) -> Option<Known> {
        let mut lines = identity.lines();
        if lines.next()? != name {
            return None;
        }
        let validator = lines.next()?;
        let size = lines.next()?.strip_prefix("size ")?.parse().ok()?;
        let (etag, last_modified) = match validator.split_once(' ')? {
            ("etag", e) => (Some(e.to_owned()), None),
            ("modified", m) => (None, Some(m.to_owned())),
            _ => return None,
        };
        Some(Known {
            identity: identity.to_owned(),
            etag,
            last_modified,
            size,
            seen,
        })
    }
}

impl DiskCache {
    fn record_path(&self, name: &str) -> PathBuf {
        self.files_dir()
            .join(format!("{:016x}", fnv1a(name.as_bytes())))
    }

    /// Notes that the file called `name` is, as of now, the version
    /// `identity`; forgets the blocks of the version it was before, if
    /// another.
    pub(crate) fn remember(&self, name: &str, identity: &str) {
        if let Some(old) = self.recall(name) {
            if old.identity != identity {
                let _ = fs::remove_dir_all(self.version_dir(&old.identity));
            }
        }
        let path = self.record_path(name);
        if let Err(e) = self.write_file(&path, identity.as_bytes()) {
            self.warn_once("cannot note a file's version", &e);
        }
    }

    /// The version of the file called `name` seen last, and when.
    pub(crate) fn recall(&self, name: &str) -> Option<Known> {
        let path = self.record_path(name);
        let file = private::open_regular(&path, MAX_RECORD_LEN).ok()?;
        let seen = file.metadata().and_then(|m| m.modified()).ok()?;
        let mut text = String::new();
        file.take(MAX_RECORD_LEN).read_to_string(&mut text).ok()?;
        Known::parse(name, &text, seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_leaves_out_the_query_and_needs_a_validator() {
        let u = |s: &str| url::Url::parse(s).unwrap();
        let a = identity(
            &u("https://h/f.nwb?X-Amz-Signature=1"),
            None,
            Some("\"e\""),
            None,
            9,
        );
        let b = identity(
            &u("https://h/f.nwb?X-Amz-Signature=2"),
            None,
            Some("\"e\""),
            None,
            9,
        );
        assert_eq!(a, b);
        assert!(!a.as_ref().unwrap().contains("Signature"));
        assert_ne!(
            a,
            identity(&u("https://h/f.nwb"), None, Some("\"f\""), None, 9)
        );
        assert_ne!(
            a,
            identity(&u("https://h/f.nwb"), None, Some("\"e\""), None, 10)
        );
        assert_eq!(identity(&u("https://h/f.nwb"), None, None, None, 9), None);
        let lm = identity(&u("https://h/f.nwb"), None, None, Some("Mon"), 9).unwrap();
        assert!(lm.contains("modified Mon"));
        let keyed = identity(&u("https://h/a"), Some("asset-1"), Some("\"e\""), None, 9);
        assert_eq!(
            keyed,
            identity(
                &u("https://other/b"),
                Some("asset-1"),
                Some("\"e\""),
                None,
                9
            )
        );
    }
}
