//! Version records: for each remote file (by its name on disk), the version
//! seen last, when, and for how long the server said it stays good (its
//! [`Freshness`]), so that a warm open can trust it for a while and a
//! changed file's old blocks are dropped.
//!
//! Nothing of a file's URL or cache key is written (see [`digest`]): a
//! record is named by a digest of the file's [`Name`] and holds the
//! version's validator and size sealed with the name as key; the version's
//! blocks are named and owned by its [`version`] digest.

use std::fs;
use std::io::Read;
use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use super::digest::{self, Digest};
use super::lock::{FetchLock, wait_while_held};
use super::{DiskCache, private};
use crate::identity::Identity;
use crate::identity::freshness::{Freshness, MAX_FRESH};
use crate::wait::Stop;

/// How the first open of a file the disk knows nothing of went.
pub(crate) enum FirstOpen {
    /// This process opens it; the claim is released once its first block is
    /// on disk.
    Ours(FetchLock),
    /// Another process opened it, or gave up: look on disk again.
    Waited,
    /// Another process still holds the claim at the end of the wait: open
    /// it without one.
    StillHeld,
    /// No claim could be made (a read-only directory): open it.
    Unclaimed,
}

/// No record this crate writes is longer (a validator is at most some
/// kilobytes).
const MAX_RECORD_LEN: u64 = 64 << 10;

/// The most versions a process remembers having forgotten (a handful is
/// usual: one per file that changed while read).
const MAX_FORGOTTEN: usize = 64;

/// The first bytes of every record (the version of its layout is in it:
/// records of the first layout were text, the file's URL in clear, under
/// other names).
const RECORD_SIGNATURE: &[u8; 8] = b"RMFREC2\0";

/// What a file is called on disk. Held in memory only: the text is never
/// written, only digests of it (and seals keyed by it). No `Debug`: its
/// query may hold a token under a name no rule knows.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Name {
    /// `url scheme://host:port/path` (no user information, query or
    /// fragment), or `key <the builder's cache key>`.
    file: String,
    /// The query without its signature and credential parameters (see
    /// [`is_signature`] and [`is_credential`]), in order; empty under a
    /// cache key. It tells apart files served at one path
    /// (`download?id=1`, `download?id=2`).
    query: String,
    /// A digest of the credential parameters left out of `query` (names
    /// and values, in order): a version confirmed by a request with other
    /// credentials is asked about again, never trusted unasked, since a
    /// server may pick the file by them.
    credentials: Digest,
    /// Where the URL's requests were redirected to, if elsewhere (a digest
    /// of that URL's own name): a version is of the file reached, not only
    /// of the URL asked for.
    via: Option<Digest>,
    /// The name says which file is meant wherever its requests go (a cache
    /// key, an S3 object's `s3://` name): no redirect is noted.
    fixed: bool,
}

impl Name {
    /// The key of the file's record, and of its seal.
    fn key(&self) -> [&[u8]; 2] {
        [self.file.as_bytes(), self.query.as_bytes()]
    }

    /// The file reached through the URL this name is of, when its requests
    /// went to `target` (the URL `request` redirected to, if it did): a
    /// name of its own unless the two name one file. Under a cache key the
    /// key names the file, wherever its URL leads.
    pub(crate) fn reached_at(self, request: &url::Url, target: &url::Url) -> Name {
        Name {
            via: self.via_to(request, target),
            ..self
        }
    }

    /// The file as a version on disk knows it: reached through `via`
    /// (for an open that trusted that version without a request).
    pub(crate) fn reached_via(self, via: Option<Digest>) -> Name {
        Name { via, ..self }
    }

    /// What [`reached_at`](Self::reached_at) notes of `target`: a digest
    /// of its name, if it names another file than `request`.
    pub(crate) fn via_to(&self, request: &url::Url, target: &url::Url) -> Option<Digest> {
        if self.fixed || request == target {
            return None;
        }
        let (asked, reached) = (name(request, None), name(target, None));
        (asked.key() != reached.key()).then(|| digest::of("remfile via", &reached.key()))
    }

    /// The name of an object a storage service names (S3's bucket and key):
    /// the service's moves (a bucket's region learnt, its requests sent to
    /// another host) reach the same object, so none is a redirect to note.
    pub(crate) fn named_by_service(self) -> Name {
        Name {
            fixed: true,
            ..self
        }
    }

    /// Whether the URL's requests went to another file's URL (a redirect).
    pub(crate) fn is_redirected(&self) -> bool {
        self.via.is_some()
    }

    /// Whether a version recalled under this name may be trusted without
    /// asking: it was confirmed with the same credentials.
    pub(crate) fn may_trust(&self, known: &Recalled) -> bool {
        known.asked_with == Some(self.credentials)
    }
}

/// The name a file goes by on disk: the builder's cache key, or its URL
/// without fragment and user information, cut into the file (scheme, host,
/// port, path) and its query without signature and credential parameters.
/// Both name the file's record and its blocks (see [`version`]), so a warm
/// open finds the version seen last of `download?id=1`, never of
/// `download?id=2`.
pub(crate) fn name(url: &url::Url, key: Option<&str>) -> Name {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    let mut credentials = url::form_urlencoded::Serializer::new(String::new());
    let signed = url.query_pairs().any(|(k, _)| is_signature_itself(&k));
    // Under a cache key the key names the file, whatever the URL carries
    // (its token may rotate from one session to the next: what the key is
    // for).
    for (k, v) in url.query_pairs().filter(|_| key.is_none()) {
        if is_credential(&k) {
            credentials.append_pair(&k, &v);
        } else if !is_signature(&k, signed) {
            query.append_pair(&k, &v);
        }
    }
    let credentials = digest::of("remfile credentials", &[credentials.finish().as_bytes()]);
    let file = match key {
        Some(k) => format!("key {k}"),
        None => {
            let mut bare = url.clone();
            bare.set_query(None);
            bare.set_fragment(None);
            let _ = bare.set_password(None);
            let _ = bare.set_username("");
            format!("url {bare}")
        }
    };
    Name {
        file,
        query: query.finish(),
        credentials,
        via: None,
        fixed: key.is_some(),
    }
}

/// Query parameters that are credentials whatever the URL: OAuth 2's
/// bearer token in a query (RFC 6750, `access_token`), a plain `token`, and
/// API keys (`api_key`, `apikey`). They authorize a request and are not
/// taken to say what it is for, so a new token still finds the file's
/// record and blocks; but a version is trusted without asking only by
/// requests with the credentials that confirmed it (see
/// [`Name::may_trust`]): a server may pick a file by its token, and the
/// ETag it answers with then tells the files apart. The list is declared,
/// never guessed: a parameter under any other name (`t`, `auth`, `hmac`)
/// is taken to say which file is meant, and a new value is a new name.
const CREDENTIALS: [&str; 4] = ["access_token", "token", "api_key", "apikey"];

fn is_credential(key: &str) -> bool {
    CREDENTIALS.iter().any(|c| key.eq_ignore_ascii_case(c))
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

/// What tells one version of a file from another — its strong ETag, or
/// else its `Last-Modified`, and its size — how long the server said it
/// stays good, the credentials it was confirmed with and where the file's
/// URL led, as the record's text holds them (sealed). `None` without a
/// validator to tell versions apart.
///
/// After the validator and the size, each further line is optional:
/// `fresh forever` or `fresh <seconds>` (none: ask), `with <hex>` (the
/// digest of the credentials, see [`Name`]) and `via <hex>` (the
/// redirect's target, see [`Name::reached_at`]). Records of earlier
/// versions of the crate have no `with` line, so they are asked about once.
fn record_text(identity: &Identity, freshness: Freshness, name: &Name) -> Option<String> {
    let validator = match (identity.strong_etag(), &identity.last_modified) {
        (Some(e), _) => format!("etag {e}"),
        (None, Some(m)) => format!("modified {m}"),
        (None, None) => return None,
    };
    let mut text = format!("{validator}\nsize {}", identity.size);
    match freshness {
        Freshness::Ask => {}
        Freshness::For(d) => text.push_str(&format!("\nfresh {}", d.as_secs())),
        Freshness::Forever => text.push_str("\nfresh forever"),
    }
    text.push_str(&format!("\nwith {}", digest::hex(&name.credentials)));
    if let Some(via) = &name.via {
        text.push_str(&format!("\nvia {}", digest::hex(via)));
    }
    Some(text)
}

/// The digest a version of the file `name` goes by on disk: its directory
/// of blocks is named by it, and every block file carries it. `None`
/// without a validator (a strong ETag, or `Last-Modified`).
///
/// It is of the whole name — scheme, host, port, path and the query
/// without signature and credential parameters (or the cache key) — and of
/// the file its requests reached (see [`Name::reached_at`]), and of the
/// validator and the size. An ETag names one representation of one
/// resource, and the query is part of the resource: two files served at
/// one path (`download?id=1`, `download?id=2`) may carry one ETag (nginx's
/// is the modification time and the size), never share their blocks.
pub(crate) fn version(name: &Name, identity: &Identity) -> Option<Digest> {
    let size = identity.size.to_le_bytes();
    let (kind, validator): (&[u8], &str) = match (identity.strong_etag(), &identity.last_modified) {
        (Some(e), _) => (b"etag", e),
        (None, Some(m)) => (b"modified", m),
        (None, None) => return None,
    };
    let via: &[u8] = name.via.as_ref().map_or(&[], |v| &v[..]);
    let parts: [&[u8]; 6] = [
        kind,
        name.file.as_bytes(),
        name.query.as_bytes(),
        via,
        validator.as_bytes(),
        &size,
    ];
    Some(digest::of("remfile version 2", &parts))
}

/// What a record's `text` (see [`record_text`]) says. A line that does not
/// parse, or comes twice, makes the record none: never trusted for longer
/// than the server said, nor with other credentials.
fn decode(text: &str) -> Option<Decoded> {
    let mut lines = text.lines();
    let validator = lines.next()?;
    let size = lines.next()?.strip_prefix("size ")?.parse().ok()?;
    let (etag, last_modified) = match validator.split_once(' ')? {
        ("etag", e) => (Some(e.to_owned()), None),
        ("modified", m) => (None, Some(m.to_owned())),
        _ => return None,
    };
    let mut decoded = Decoded {
        identity: Identity {
            size,
            etag,
            last_modified,
        },
        freshness: Freshness::Ask,
        asked_with: None,
        via: None,
    };
    let mut seen = (false, false, false);
    for line in lines {
        let (what, value) = line.split_once(' ')?;
        let first = |seen: &mut bool| !std::mem::replace(seen, true);
        match what {
            "fresh" if first(&mut seen.0) => decoded.freshness = fresh(value)?,
            "with" if first(&mut seen.1) => decoded.asked_with = Some(digest::from_hex(value)?),
            "via" if first(&mut seen.2) => decoded.via = Some(digest::from_hex(value)?),
            _ => return None,
        }
    }
    Some(decoded)
}

/// A `fresh` line's value.
fn fresh(value: &str) -> Option<Freshness> {
    match value {
        "forever" => Some(Freshness::Forever),
        secs if !secs.is_empty() && secs.bytes().all(|b| b.is_ascii_digit()) => {
            let secs = std::time::Duration::from_secs(secs.parse().ok()?);
            Some(Freshness::For(secs.min(MAX_FRESH)))
        }
        _ => None,
    }
}

/// What a record says.
#[derive(Debug, PartialEq)]
struct Decoded {
    identity: Identity,
    freshness: Freshness,
    asked_with: Option<Digest>,
    via: Option<Digest>,
}

/// The version of a file seen last, as [`DiskCache::recall`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recalled {
    pub identity: Identity,
    /// Its [`version`] digest.
    pub version: Digest,
    /// When it was last confirmed.
    pub seen: SystemTime,
    /// How long the server said it stays good after that.
    pub freshness: Freshness,
    /// The digest of the credentials it was confirmed with (see [`Name`]),
    /// if the record says.
    pub asked_with: Option<Digest>,
    /// Where the URL led when it was confirmed (see [`Name::reached_at`]).
    pub via: Option<Digest>,
}

impl DiskCache {
    fn record_path(&self, name: &Name) -> PathBuf {
        self.files_dir()
            .join(digest::hex(&digest::of("remfile record", &name.key())))
    }

    /// Claims the first open of the file called `name`, which the disk
    /// knows nothing of, so that processes opening it at the same moment
    /// fetch its first block once: the one that gets the claim opens it as
    /// usual (and notes the version it got and releases the claim once its
    /// first blocks are on disk, see [`DiskCache::remember_after_writes`]);
    /// the others wait for that, then open it warm. The wait ends at a
    /// stop of the open (an error then), or at the [`wait_bound`](super::wait_bound)
    /// of the open's deadline: a holder that lives is bounded by its own deadline,
    /// one that ended is seen at once (see [`lock`](super::lock)), and a
    /// first open that takes long (a slow server, a long tail) is still
    /// waited for rather than made again by every process.
    pub(crate) fn claim_first_open(
        &self,
        name: &Name,
        stop: &Stop,
    ) -> crate::error::Result<FirstOpen> {
        let path = self.record_path(name).with_extension("lock");
        Ok(match FetchLock::take(&path) {
            Ok(Some(lock)) => FirstOpen::Ours(lock),
            Ok(None) => match wait_while_held(&path, super::wait_bound(stop.deadline()), stop)? {
                true => FirstOpen::Waited,
                false => FirstOpen::StillHeld,
            },
            Err(_) => FirstOpen::Unclaimed,
        })
    }

    /// Notes that the file called `name` is, as of now, the version
    /// `identity`, good for as long as `freshness` says; forgets the blocks
    /// of the version it was before, if another. Nothing is noted of a
    /// version without a validator.
    pub(crate) fn remember(&self, name: &Name, identity: &Identity, freshness: Freshness) {
        self.remember_confirmed_at(name, identity, freshness, Instant::now());
    }

    /// As [`remember`](Self::remember), for an answer that came at
    /// `confirmed`: nothing is noted if this process forgot the version
    /// since (a `412` to a read that came after that answer, but before its
    /// note was written).
    fn remember_confirmed_at(
        &self,
        name: &Name,
        identity: &Identity,
        freshness: Freshness,
        confirmed: Instant,
    ) {
        let text = record_text(identity, freshness, name);
        let (Some(version), Some(text)) = (version(name, identity), text) else {
            return;
        };
        let forgotten_since = |(v, at): &(Digest, Instant)| *v == version && *at >= confirmed;
        if self.inner.forgotten.lock().iter().any(forgotten_since) {
            return;
        }
        if let Some(old) = self.recall(name) {
            if old.version != version {
                let _ = fs::remove_dir_all(self.version_dir(&old.version));
            }
        }
        let mut record = RECORD_SIGNATURE.to_vec();
        record.extend(digest::seal(&name.key(), text.as_bytes()));
        if let Err(e) = self.store_file(&self.record_path(name), &record) {
            self.warn_once("cannot note a file's version", &e);
        }
    }

    /// Forgets `version` of the file called `name`: its record, if the
    /// record still names that version (another process may have noted a
    /// newer one meanwhile), and its blocks.
    pub(crate) fn forget(&self, name: &Name, version: &Digest) {
        {
            let mut forgotten = self.inner.forgotten.lock();
            if forgotten.len() >= MAX_FORGOTTEN {
                forgotten.pop_front();
            }
            forgotten.push_back((*version, Instant::now()));
        }
        if self
            .recall(name)
            .is_some_and(|known| known.version == *version)
        {
            let _ = fs::remove_file(self.record_path(name));
        }
        let _ = fs::remove_dir_all(self.version_dir(version));
        tracing::debug!("disk cache: a version the server no longer has was forgotten");
    }

    /// As [`remember`](Self::remember), once the blocks queued so far (the
    /// file's first blocks) are on disk; then releases `claim`, the file's
    /// first-open claim. So a record on disk comes with the blocks fetched
    /// with it, and a process that waited for the claim finds the record
    /// new: the server's answer to this open, given while it waited.
    pub(crate) fn remember_after_writes(
        &self,
        name: &Name,
        identity: &Identity,
        freshness: Freshness,
        claim: FetchLock,
    ) {
        let (cache, name, identity) = (self.clone(), name.clone(), identity.clone());
        let confirmed = Instant::now();
        let note = move || cache.remember_confirmed_at(&name, &identity, freshness, confirmed);
        self.release_after_writes_then(vec![claim], Some(Box::new(note)));
    }

    /// The version of the file called `name` seen last, and when.
    pub(crate) fn recall(&self, name: &Name) -> Option<Recalled> {
        let path = self.record_path(name);
        let file = private::open_regular(&path, MAX_RECORD_LEN).ok()?;
        let seen = file.metadata().and_then(|m| m.modified()).ok()?;
        let mut bytes = Vec::new();
        file.take(MAX_RECORD_LEN).read_to_end(&mut bytes).ok()?;
        let sealed = bytes.strip_prefix(RECORD_SIGNATURE)?;
        let text = String::from_utf8(digest::unseal(&name.key(), sealed)?).ok()?;
        let decoded = decode(&text)?;
        let reached = Name {
            via: decoded.via,
            ..name.clone()
        };
        Some(Recalled {
            version: version(&reached, &decoded.identity)?,
            identity: decoded.identity,
            seen,
            freshness: decoded.freshness,
            asked_with: decoded.asked_with,
            via: decoded.via,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name's file and query, as text (a test's eyes only).
    fn n(url: &str) -> (String, String) {
        let name = name(&url::Url::parse(url).unwrap(), None);
        (name.file, name.query)
    }

    fn pair(file: &str, query: &str) -> (String, String) {
        (file.to_owned(), query.to_owned())
    }

    #[test]
    fn a_name_drops_signatures_and_credentials_and_keeps_what_names_the_file() {
        assert_ne!(n("https://h/download?id=1"), n("https://h/download?id=2"));
        assert_eq!(
            n("https://h/download?id=1"),
            pair("url https://h/download", "id=1")
        );
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
            pair("url https://b.s3.amazonaws.com/blobs/x", "versionId=7")
        );
        let cloudfront = n("https://d.cloudfront.net/f?Expires=1&Signature=s&Key-Pair-Id=k&part=2");
        assert_eq!(cloudfront, pair("url https://d.cloudfront.net/f", "part=2"));
        let azure =
            n("https://a.blob.core.windows.net/c/f?sv=2020&se=2026&sr=b&sp=r&sig=x%3D&snapshot=3");
        assert_eq!(
            azure,
            pair("url https://a.blob.core.windows.net/c/f", "snapshot=3")
        );
        // Without a signature, short names are the application's own.
        assert_eq!(
            n("https://h/f?sp=1&st=2"),
            pair("url https://h/f", "sp=1&st=2")
        );
        assert_eq!(
            n("https://u:pw@h:8443/f#frag"),
            pair("url https://h:8443/f", "")
        );
        // Bearer tokens and API keys, whatever their case.
        assert_eq!(
            n("https://h/f?Access_Token=T1&api_key=K&apikey=K2&id=1"),
            pair("url https://h/f", "id=1")
        );
        assert_eq!(
            n("https://h/f?access_token=T2&id=1"),
            n("https://h/f?id=1&access_token=T3")
        );
        let keyed = name(
            &url::Url::parse("https://h/a?id=1").unwrap(),
            Some("asset-1"),
        );
        assert_eq!((keyed.file, keyed.query), pair("key asset-1", ""));
    }

    fn version_of(etag: Option<&str>, last_modified: Option<&str>, size: u64) -> Identity {
        Identity {
            size,
            etag: etag.map(str::to_owned),
            last_modified: last_modified.map(str::to_owned),
        }
    }

    #[test]
    fn a_version_is_of_the_whole_name_its_validator_and_its_size() {
        let u = |s: &str| name(&url::Url::parse(s).unwrap(), None);
        let e = version_of(Some("\"e\""), None, 9);
        let a = version(&u("https://h/f.nwb?X-Amz-Signature=1"), &e);
        assert!(a.is_some());
        // A token under a declared name, rotated: the same blocks.
        assert_eq!(a, version(&u("https://h/f.nwb?token=2&access_token=3"), &e));
        // Under any other name it says which file is meant.
        assert_ne!(a, version(&u("https://h/f.nwb?t=2"), &e));
        let f = u("https://h/f.nwb");
        assert_ne!(a, version(&f, &version_of(Some("\"f\""), None, 9)));
        assert_ne!(a, version(&f, &version_of(Some("\"e\""), None, 10)));
        assert_ne!(a, version(&u("https://h/g.nwb"), &e));
        assert_ne!(a, version(&u("https://h:8443/f.nwb"), &e));
        assert_ne!(a, version(&u("http://h/f.nwb"), &e));
        assert_eq!(version(&f, &version_of(None, None, 9)), None);
        assert_eq!(
            version(&f, &version_of(Some("W/\"e\""), None, 9)),
            None,
            "a weak ETag"
        );
        // One strong ETag and size, two files told apart by the query.
        assert_ne!(
            version(&u("https://h/download?id=1"), &e),
            version(&u("https://h/download?id=2"), &e)
        );
        // Last-Modified only: likewise.
        let lm = version_of(Some("W/\"e\""), Some("Mon"), 9);
        let one = version(&u("https://h/download?id=1"), &lm);
        assert!(one.is_some());
        assert_ne!(one, version(&u("https://h/download?id=2"), &lm));
        assert_eq!(
            one,
            version(&u("https://h/download?id=1&access_token=x"), &lm)
        );
        assert_ne!(
            one,
            version(
                &u("https://h/download?id=1"),
                &version_of(None, Some("Tue"), 9)
            )
        );
        // An ETag and a date of the same text are two versions.
        assert_ne!(
            version(&f, &version_of(Some("\"x\""), None, 9)),
            version(&f, &version_of(None, Some("\"x\""), 9))
        );
        // A cache key names the file whatever its URL.
        let key = |s: &str| name(&url::Url::parse(s).unwrap(), Some("asset-1"));
        assert_eq!(
            version(&key("https://h/a?id=1"), &lm),
            version(&key("https://other/b"), &lm)
        );
        assert_ne!(
            version(&key("https://h/a"), &e),
            version(&u("https://h/a"), &e)
        );
    }

    #[test]
    fn forgetting_a_version_drops_its_record_only_if_it_is_still_the_files() {
        let dir_own = tempfile::tempdir().unwrap();
        let disk = DiskCache::open(dir_own.path().join("d"), 1 << 20).unwrap();
        let f = name(&url::Url::parse("https://h/f").unwrap(), None);
        let (v1, v2) = (
            version_of(Some("\"1\""), None, 9),
            version_of(Some("\"2\""), None, 9),
        );
        let (d1, d2) = (version(&f, &v1).unwrap(), version(&f, &v2).unwrap());
        disk.remember(&f, &v2, Freshness::Forever);
        disk.forget(&f, &d1);
        assert_eq!(disk.recall(&f).unwrap().version, d2, "a newer one stays");
        disk.forget(&f, &d2);
        assert_eq!(disk.recall(&f), None);
        // A note of an answer that came before the version was forgotten,
        // written late (the first open's, once its blocks are on disk), is
        // not written; one of a later answer is.
        let before = Instant::now() - std::time::Duration::from_secs(1);
        disk.remember_confirmed_at(&f, &v2, Freshness::Forever, before);
        assert_eq!(disk.recall(&f), None, "a stale note");
        disk.remember(&f, &v2, Freshness::Forever);
        assert_eq!(disk.recall(&f).unwrap().version, d2, "confirmed again");
    }

    #[test]
    fn a_version_reads_back_as_written() {
        let hour = Freshness::For(std::time::Duration::from_secs(3600));
        let u = |s: &str| url::Url::parse(s).unwrap();
        let plain = name(&u("https://h/f?id=1"), None);
        let redirected = name(&u("https://h/latest?token=T"), None)
            .reached_at(&u("https://h/latest"), &u("https://h/b"));
        assert!(redirected.is_redirected());
        for v in [
            version_of(Some("\"e\""), None, 9),
            version_of(None, Some("Mon, 1 Dec"), 1 << 40),
        ] {
            for f in [Freshness::Ask, hour, Freshness::Forever] {
                for n in [&plain, &redirected] {
                    let decoded = decode(&record_text(&v, f, n).unwrap()).unwrap();
                    assert_eq!(decoded.identity, v);
                    assert_eq!(decoded.freshness, f);
                    assert_eq!(decoded.asked_with, Some(n.credentials));
                    assert_eq!(decoded.via, n.via);
                }
            }
        }
        // As earlier versions wrote it: no freshness (ask), no credentials
        // (asked about before it is trusted).
        let earlier = decode("etag \"e\"\nsize 9").unwrap();
        assert_eq!(
            (earlier.freshness, earlier.asked_with),
            (Freshness::Ask, None)
        );
        assert_eq!(decode("size 9"), None, "damaged");
        assert_eq!(decode("etag \"e\"\nsize 9\nmore"), None, "damaged");
        assert_eq!(decode("etag \"e\"\nsize 9\nfresh "), None, "damaged");
        assert_eq!(decode("etag \"e\"\nsize 9\nfresh -1"), None, "damaged");
        assert_eq!(decode("etag \"e\"\nsize 9\nfresh 1\nx"), None, "damaged");
        assert_eq!(
            decode("etag \"e\"\nsize 9\nfresh 1\nfresh 2"),
            None,
            "twice"
        );
        assert_eq!(decode("etag \"e\"\nsize 9\nwith 00"), None, "damaged");
        assert_eq!(decode("etag \"e\"\nsize 9\nvia xyz"), None, "damaged");
        let long = format!("etag \"e\"\nsize 9\nfresh {}", "9".repeat(40));
        assert_eq!(decode(&long), None, "damaged");
        let clamped = decode("etag \"e\"\nsize 9\nfresh 99999999999").unwrap();
        assert_eq!(clamped.freshness, Freshness::For(MAX_FRESH));
    }

    #[test]
    fn a_version_is_trusted_only_with_the_credentials_that_confirmed_it() {
        let u = |s: &str| url::Url::parse(s).unwrap();
        let a = name(&u("https://h/download?id=1&token=A"), None);
        let b = name(&u("https://h/download?id=1&token=B"), None);
        assert!(a.key() == b.key(), "one record");
        let v = version_of(Some("\"e\""), None, 9);
        let known = |n: &Name| Recalled {
            identity: v.clone(),
            version: version(n, &v).unwrap(),
            seen: std::time::SystemTime::now(),
            freshness: Freshness::Forever,
            asked_with: Some(n.credentials),
            via: None,
        };
        assert!(a.may_trust(&known(&a)));
        assert!(!b.may_trust(&known(&a)), "another token");
        let earlier = Recalled {
            asked_with: None,
            ..known(&a)
        };
        assert!(!a.may_trust(&earlier), "a record that does not say");
        // Signatures are bound to the object they sign: a new one is trusted.
        let s1 = name(&u("https://h/f?X-Amz-Signature=1&X-Amz-Date=1"), None);
        let s2 = name(&u("https://h/f?X-Amz-Signature=2&X-Amz-Date=2"), None);
        assert!(s2.may_trust(&known(&s1)));
        // Under a cache key the key names the file, whatever the token.
        let keyed = |t: &str| name(&u(&format!("https://h/d?token={t}")), Some("k"));
        assert!(keyed("B").may_trust(&known(&keyed("A"))));
    }

    #[test]
    fn a_redirect_to_another_file_is_another_version() {
        let u = |s: &str| url::Url::parse(s).unwrap();
        let latest = || name(&u("https://h/latest"), None);
        let v = version_of(Some("\"e\""), None, 9);
        let to = |target: &str| latest().reached_at(&u("https://h/latest"), &u(target));
        assert_eq!(to("https://h/latest").via, None, "not redirected");
        assert_ne!(
            version(&to("https://h/a"), &v),
            version(&to("https://h/b"), &v)
        );
        assert_ne!(version(&to("https://h/a"), &v), version(&latest(), &v));
        // A presigned target whose signature rotates is one file.
        assert_eq!(
            version(&to("https://s3/a?X-Amz-Signature=1"), &v),
            version(&to("https://s3/a?X-Amz-Signature=2"), &v)
        );
        // Under a cache key, the key names the file wherever the URL leads.
        let keyed = name(&u("https://h/latest"), Some("k"))
            .reached_at(&u("https://h/latest"), &u("https://h/a"));
        assert_eq!(keyed.via, None);
    }

    #[test]
    fn a_record_holds_no_text_of_the_url_or_the_validator() {
        let dir_own = tempfile::tempdir().unwrap();
        let dir = dir_own.path().join("dir");
        let _ = fs::remove_dir_all(&dir);
        let disk = DiskCache::open(&dir, 1 << 20).unwrap();
        let url = "https://user:PW@host.example/data/f.nwb?access_token=TOKEN&id=IDENT";
        let url = url::Url::parse(url).unwrap();
        let f = name(&url, None);
        let v = version_of(Some("\"ETAGVALUE\""), None, 12345);
        disk.remember(&f, &v, Freshness::Forever);
        let recalled = disk.recall(&f).unwrap();
        assert_eq!(recalled.identity, v);
        assert_eq!(recalled.freshness, Freshness::Forever);
        assert_eq!(Some(recalled.version), version(&f, &v));
        // Under another name (another query that names a file), nothing.
        let url = url::Url::parse("https://host.example/data/f.nwb?id=2").unwrap();
        let other = name(&url, None);
        assert_eq!(disk.recall(&other), None);
        let dated = version_of(None, Some("Mon, 30 Nov 2026"), 12345);
        disk.remember(&other, &dated, Freshness::Ask);
        assert_eq!(disk.recall(&other).unwrap().identity, dated);
        let records: Vec<_> = fs::read_dir(dir.join("files")).unwrap().flatten().collect();
        assert_eq!(records.len(), 2);
        for record in records {
            let bytes = fs::read(record.path()).unwrap();
            let text = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
            for clear in [
                "host", "data", "f.nwb", "pw", "token", "ident", "etag", "nov", "12345", "fresh",
            ] {
                assert!(!text.contains(clear), "{clear} in {text:?}");
            }
            assert!(digest::is_hex(&record.file_name().to_string_lossy()));
        }
        let _ = fs::remove_dir_all(&dir);
    }
}
