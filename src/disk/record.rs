//! Version records: for each remote file (by its name on disk), the version
//! seen last and when, so that a warm open can trust it for a while and a
//! changed file's old blocks are dropped.

use std::fs;
use std::io::Read;
use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use super::lock::{FetchLock, WAIT_AT_MOST, look_while_held};
use super::{DiskCache, fnv1a, private};
use crate::identity::Identity;

/// How the first open of a file the disk knows nothing of went.
pub(crate) enum FirstOpen {
    /// This process opens it; the claim is released once its first block is
    /// on disk.
    Ours(FetchLock),
    /// Another process opened it, or gave up: look on disk again.
    Waited,
    /// No claim could be made (a read-only directory): open it.
    Unclaimed,
}

/// No record this crate writes is longer (a URL is at most some kilobytes).
const MAX_RECORD_LEN: u64 = 1 << 20;

/// The name a file goes by on disk: its URL without signature parameters
/// (see [`is_signature`]), fragment and credentials, or the builder's key.
/// The rest of the query stays: `download?id=1` and `download?id=2` are
/// two files.
pub(crate) fn name(url: &url::Url, key: Option<&str>) -> String {
    match key {
        Some(k) => format!("key {k}"),
        None => {
            let mut bare = url.clone();
            let signed = url.query_pairs().any(|(k, _)| is_signature_itself(&k));
            let kept: Vec<(String, String)> = url
                .query_pairs()
                .filter(|(k, _)| !is_signature(k, signed))
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            bare.set_query(None);
            if !kept.is_empty() {
                bare.query_pairs_mut().extend_pairs(kept);
            }
            bare.set_fragment(None);
            let _ = bare.set_password(None);
            let _ = bare.set_username("");
            format!("url {bare}")
        }
    }
}

/// Query parameters that carry a URL's signature itself.
fn is_signature_itself(key: &str) -> bool {
    ["x-amz-signature", "x-goog-signature", "signature", "sig"]
        .iter()
        .any(|s| key.eq_ignore_ascii_case(s))
}

/// Whether query parameter `key` signs or authorizes a URL rather than
/// names what it serves, so that it changes from one presigned URL of an
/// object to the next: S3's and GCS's `X-Amz-*` and `X-Goog-*` always; in a
/// `signed` URL (one with a signature parameter) also S3's and GCS's older
/// `AWSAccessKeyId`, `GoogleAccessId`, `Signature` and `Expires`,
/// CloudFront's `Policy` and `Key-Pair-Id`, and Azure's SAS fields (`sv`,
/// `ss`, `srt`, `sp`, `se`, `st`, `spr`, `sig`, `sr`, `si`, `sdd`, `ses`,
/// `skoid`, `sktid`, `skt`, `ske`, `sks`, `skv`, `saoid`, `suoid`, `scid`).
fn is_signature(key: &str, signed: bool) -> bool {
    const ALWAYS: [&str; 2] = ["x-amz-", "x-goog-"];
    const WHEN_SIGNED: [&str; 27] = [
        "awsaccesskeyid",
        "googleaccessid",
        "signature",
        "expires",
        "policy",
        "key-pair-id",
        "sv",
        "ss",
        "srt",
        "sp",
        "se",
        "st",
        "spr",
        "sig",
        "sr",
        "si",
        "sdd",
        "ses",
        "skoid",
        "sktid",
        "skt",
        "ske",
        "sks",
        "skv",
        "saoid",
        "suoid",
        "scid",
    ];
    let lower = key.to_ascii_lowercase();
    ALWAYS.iter().any(|p| lower.starts_with(p)) || (signed && WHEN_SIGNED.contains(&lower.as_str()))
}

/// A version of a file, as the disk cache writes it: the file's [`name`],
/// its validator (a strong ETag, else `Last-Modified`) and its size, one per
/// line. The text is the version's record and names its directory of
/// blocks. `None` without a validator to tell versions apart.
pub(crate) fn encode(name: &str, identity: &Identity) -> Option<String> {
    let validator = identity
        .strong_etag()
        .map(|e| format!("etag {e}"))
        .or_else(|| {
            identity
                .last_modified
                .as_ref()
                .map(|m| format!("modified {m}"))
        })?;
    Some(format!("{name}\n{validator}\nsize {}", identity.size))
}

/// The version `text` encodes, if it is one of the file called `name`.
fn decode(name: &str, text: &str) -> Option<Identity> {
    let mut lines = text.lines();
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
    Some(Identity {
        size,
        etag,
        last_modified,
    })
}

/// The version of a file seen last, as [`DiskCache::recall`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recalled {
    /// Its text (see [`encode`]).
    pub text: String,
    pub identity: Identity,
    /// When it was last confirmed.
    pub seen: SystemTime,
}

impl DiskCache {
    fn record_path(&self, name: &str) -> PathBuf {
        self.files_dir()
            .join(format!("{:016x}", fnv1a(name.as_bytes())))
    }

    /// Claims the first open of the file called `name`, which the disk
    /// knows nothing of, so that processes opening it at the same moment
    /// fetch its first block once: the one that gets the claim opens it as
    /// usual (and releases the claim once its first block is on disk, see
    /// [`DiskCache::release_after_writes`]); the others wait for that, then
    /// open it warm.
    pub(crate) fn claim_first_open(&self, name: &str, deadline: Instant) -> FirstOpen {
        let path = self.record_path(name).with_extension("lock");
        match FetchLock::take(&path) {
            Ok(Some(lock)) => FirstOpen::Ours(lock),
            Ok(None) => {
                let deadline = deadline.min(Instant::now() + WAIT_AT_MOST);
                look_while_held(&path, deadline, || None::<()>);
                FirstOpen::Waited
            }
            Err(_) => FirstOpen::Unclaimed,
        }
    }

    /// Notes that the file called `name` is, as of now, the version
    /// `identity`; forgets the blocks of the version it was before, if
    /// another.
    pub(crate) fn remember(&self, name: &str, identity: &str) {
        if let Some(old) = self.recall(name) {
            if old.text != identity {
                let _ = fs::remove_dir_all(self.version_dir(&old.text));
            }
        }
        let path = self.record_path(name);
        if let Err(e) = self.store_file(&path, identity.as_bytes()) {
            self.warn_once("cannot note a file's version", &e);
        }
    }

    /// The version of the file called `name` seen last, and when.
    pub(crate) fn recall(&self, name: &str) -> Option<Recalled> {
        let path = self.record_path(name);
        let file = private::open_regular(&path, MAX_RECORD_LEN).ok()?;
        let seen = file.metadata().and_then(|m| m.modified()).ok()?;
        let mut text = String::new();
        file.take(MAX_RECORD_LEN).read_to_string(&mut text).ok()?;
        let identity = decode(name, &text)?;
        Some(Recalled {
            text,
            identity,
            seen,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_drops_signatures_and_keeps_what_names_the_file() {
        let n = |s: &str| name(&url::Url::parse(s).unwrap(), None);
        assert_ne!(n("https://h/download?id=1"), n("https://h/download?id=2"));
        assert_eq!(n("https://h/download?id=1"), "url https://h/download?id=1");
        let s3 = |sig: &str, date: &str| {
            n(&format!(
                "https://b.s3.amazonaws.com/blobs/x?versionId=7&X-Amz-Algorithm=AWS4-HMAC-SHA256\
                 &X-Amz-Credential=AK%2F1&X-Amz-Date={date}&X-Amz-Expires=3600\
                 &X-Amz-SignedHeaders=host&X-Amz-Signature={sig}"
            ))
        };
        assert_eq!(s3("ab", "20261201T000000Z"), s3("cd", "20261202T000000Z"));
        assert_eq!(
            s3("ab", "1"),
            "url https://b.s3.amazonaws.com/blobs/x?versionId=7"
        );
        let cloudfront = n("https://d.cloudfront.net/f?Expires=1&Signature=s&Key-Pair-Id=k&part=2");
        assert_eq!(cloudfront, "url https://d.cloudfront.net/f?part=2");
        let azure =
            n("https://a.blob.core.windows.net/c/f?sv=2020&se=2026&sr=b&sp=r&sig=x%3D&snapshot=3");
        assert_eq!(azure, "url https://a.blob.core.windows.net/c/f?snapshot=3");
        // Without a signature, short names are the application's own.
        assert_eq!(n("https://h/f?sp=1&st=2"), "url https://h/f?sp=1&st=2");
        assert_eq!(n("https://u:pw@h/f#frag"), "url https://h/f");
    }

    fn version(etag: Option<&str>, last_modified: Option<&str>, size: u64) -> Identity {
        Identity {
            size,
            etag: etag.map(str::to_owned),
            last_modified: last_modified.map(str::to_owned),
        }
    }

    #[test]
    fn a_version_leaves_out_the_query_and_needs_a_validator() {
        let u = |s: &str| name(&url::Url::parse(s).unwrap(), None);
        let e = version(Some("\"e\""), None, 9);
        let a = encode(&u("https://h/f.nwb?X-Amz-Signature=1"), &e);
        assert_eq!(a, encode(&u("https://h/f.nwb?X-Amz-Signature=2"), &e));
        assert!(!a.as_ref().unwrap().contains("Signature"));
        let f = u("https://h/f.nwb");
        assert_ne!(a, encode(&f, &version(Some("\"f\""), None, 9)));
        assert_ne!(a, encode(&f, &version(Some("\"e\""), None, 10)));
        assert_eq!(encode(&f, &version(None, None, 9)), None);
        assert_eq!(
            encode(&f, &version(Some("W/\"e\""), None, 9)),
            None,
            "a weak ETag"
        );
        let lm = encode(&f, &version(None, Some("Mon"), 9)).unwrap();
        assert!(lm.contains("modified Mon"));
        let key = |s: &str| name(&url::Url::parse(s).unwrap(), Some("asset-1"));
        assert_eq!(
            encode(&key("https://h/a"), &e),
            encode(&key("https://other/b"), &e)
        );
    }

    #[test]
    fn a_version_reads_back_as_written() {
        let f = "url https://h/f.nwb";
        for v in [
            version(Some("\"e\""), None, 9),
            version(None, Some("Mon, 1 Dec"), 1 << 40),
        ] {
            assert_eq!(decode(f, &encode(f, &v).unwrap()), Some(v));
        }
        let text = encode(f, &version(Some("\"e\""), None, 9)).unwrap();
        assert_eq!(decode("url https://h/other", &text), None, "another file's");
        assert_eq!(decode(f, "url https://h/f.nwb\nsize 9"), None, "damaged");
    }
}
