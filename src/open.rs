//! Opening a file: from checked options and a URL to a running engine. The
//! agent and transport are made, the first block is fetched (learning the
//! file's size and validators) with the tail beside it — or, with a disk
//! cache that holds the file, taken from there, with one request that asks
//! whether it changed or none where the version is trusted — the cache and
//! the file's key in it are chosen, and the fetched blocks are cached.

use std::sync::Arc;

use url::Url;

use crate::cache::{BlockCache, FileKey};
use crate::disk::{self, DiskFile, DiskTier, FetchLock, FirstOpen, Recalled};
use crate::engine::plan;
use crate::engine::{Engine, ReadOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::file::RemoteFile;
use crate::http::{self, Opened, Revalidated, Service, Tail, Timeouts, Transport, TransportConfig};
use crate::identity::Identity;
use crate::identity::freshness::{self, Freshness, Trust};
use crate::link::{Line, LinkMeter, priced_tail};
use crate::options::Builder;
use crate::s3;
use crate::stats::Counters;
use crate::wait::Stop;

// The builder's last step lives with the open sequence it starts, so that
// the options stay data that names no file.
impl Builder {
    /// Opens the file at `url`: one request, which learns its size and
    /// validators and fetches its first block.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`] for options out of range,
    /// [`ErrorKind::InvalidUrl`] for a URL that is not `http(s)`, and the
    /// errors of a read (see [`RemoteFile::open`]).
    pub fn open(&self, url: impl AsRef<str>) -> Result<RemoteFile> {
        if crate::wait::host().is_none() {
            return open(self, url.as_ref(), &Stop::here());
        }
        let (builder, url) = (self.clone(), url.as_ref().to_owned());
        crate::wait::blocking(move |stop| open(&builder, &url, stop))
    }
}

/// Opens the file at `url` with the options of `builder`, within what
/// `stop` allows.
pub(crate) fn open(builder: &Builder, text: &str, stop: &Stop) -> Result<RemoteFile> {
    open_among(builder, text, 1, stop)
}

/// As [`open`], for one of `together` files at work at once (a batch's):
/// its tail is priced as one of theirs from its first request, before the
/// line counts the others opening.
pub(crate) fn open_among(
    builder: &Builder,
    text: &str,
    together: u64,
    stop: &Stop,
) -> Result<RemoteFile> {
    builder.validate()?;
    let (request_url, url, service) = if s3::is_s3(text) {
        if let Some(why) = builder
            .headers
            .iter()
            .find_map(|(name, _)| http::header::refuse_for_signed(name))
        {
            return Err(Error::new(ErrorKind::InvalidConfig, why));
        }
        let resolved = s3::resolve(&builder.s3, text, builder.https_only)?;
        (
            resolved.url,
            resolved.name,
            Some((resolved.access, resolved.shown)),
        )
    } else {
        let url = parse_url(text, builder.https_only)?;
        (url.clone(), url, None)
    };
    let counters = Arc::new(Counters::default());
    if builder.trace_requests {
        counters.trace.turn_on();
    }
    let link = Arc::new(LinkMeter::on(
        builder.link,
        builder.byte_weight,
        Line::to(&request_url),
    ));
    let asked_at = request_url.clone();
    let by_service = service.is_some();
    let transport = transport(builder, request_url, service, &link, &counters)?;
    let name = disk::name(&url, builder.cache_key.as_deref());
    // S3 names its object by bucket and key wherever its requests go (a
    // region learnt moves them to another host): no redirect of a file.
    let name = if by_service {
        name.named_by_service()
    } else {
        name
    };
    let (warm, first_open) = look_on_disk(builder, &name, stop)?;
    let (opened, tail, known_via) = match warm {
        Some(warm) => {
            let via = warm.known.via;
            let (opened, asked) = warm_open(builder, &transport, warm, (&name, &asked_at), stop)?;
            (opened, None, (!asked).then_some(via))
        }
        None => {
            // Where bytes are dear, the tail is priced by this file's share
            // of the line (as the files opening on it at once know it); a
            // server known to be near takes it whole.
            let _at_work = link.at_work();
            let _opening = link.opening();
            let tail = if link.is_near() {
                builder.open_tail
            } else {
                priced_tail(
                    builder.open_tail,
                    link.guess_estimate(),
                    link.opening_now().max(together),
                )
            };
            let (opened, tail) = first_request(&transport, builder.block_size, tail, stop);
            (opened?, tail, None)
        }
    };
    let asked = known_via.is_none();
    let tail = tail.and_then(|t| matching_tail(t, &opened.identity, &transport));
    // The file the URL reached: where this open's requests went, or, for a
    // version trusted without one, where they went when it was confirmed.
    let name = match known_via {
        Some(via) => name.reached_via(via),
        None => name.reached_at(&asked_at, &transport.target()),
    };
    // What the server says of a redirect's target is not said of the URL
    // that led there (which may lead elsewhere next time): ask again.
    let freshness = match opened.freshness {
        _ if asked && name.is_redirected() => Freshness::Ask,
        said => said,
    };
    // The first open of a file notes its version once its first blocks are
    // on disk (below); any other answer, now.
    let confirmed = (asked && first_open.is_none()).then_some(freshness);
    let identity = opened.identity.clone();
    let meters = (link, counters);
    let disk = disk_file(builder, &name, &identity, confirmed);
    let engine = engine_over(builder, &url, transport, opened.identity, meters, disk);
    seed(&engine, opened.first, tail, builder.block_size);
    if let (Some(claim), Some(disk)) = (first_open, &builder.disk_cache) {
        // The blocks fetched at open (the tail's too) on disk, then the
        // version noted, then the claim let go: the processes waiting for
        // it find all three.
        disk.remember_after_writes(&name, &identity, freshness, claim);
    }
    Ok(RemoteFile::new(engine))
}

/// Caches the blocks fetched at open: the first, and the tail's whole
/// blocks, if a tail came.
fn seed(engine: &Engine, first: Vec<u8>, tail: Option<Tail>, block_size: u64) {
    engine.seed(0, first);
    for (index, block) in tail.map(|t| tail_blocks(t, block_size)).unwrap_or_default() {
        // The first block came with the opening request.
        if index > 0 {
            engine.seed(index, block);
        }
    }
}

/// A file over `source` (an in-memory one, in unit tests), opened as
/// `builder` says but without an opening request: the engine and its
/// caches as [`open`] wires them.
#[cfg(test)]
pub(crate) fn open_over(
    builder: &Builder,
    source: std::sync::Arc<crate::engine::memory_source::MemorySource>,
) -> RemoteFile {
    let url = Url::parse("http://memory.test/file").expect("a URL");
    let identity = source.identity();
    let meters = (Arc::new(LinkMeter::new(builder.link)), source.counters());
    source.measure_with(Arc::clone(&meters.0));
    let confirmed = Some(crate::identity::freshness::Freshness::Ask);
    let name = disk::name(&url, builder.cache_key.as_deref());
    let disk = disk_file(builder, &name, &identity, confirmed);
    RemoteFile::new(engine_over(builder, &url, source, identity, meters, disk))
}

/// The engine of the file at `url`, version `identity`, read through
/// `source`: its memory cache as `builder` says, its blocks on `disk` (if
/// any), and in driver builds the driver's side store.
fn engine_over(
    builder: &Builder,
    url: &Url,
    source: impl crate::engine::range_source::RangeSource,
    identity: Identity,
    (link, counters): (Arc<LinkMeter>, Arc<Counters>),
    disk: Option<DiskFile>,
) -> Engine {
    let cache = builder
        .cache
        .clone()
        .unwrap_or_else(|| BlockCache::new(builder.cache_capacity));
    let key = file_key(&cache, url, &identity, builder.block_size);
    let options = read_options(builder, &cache);
    // The disk cache, a tier between the memory cache and the network.
    let store = disk.map(|file| {
        let tier = DiskTier::new(
            file,
            builder.block_size,
            identity.size,
            Arc::clone(&counters),
        );
        Arc::new(tier) as Arc<dyn crate::engine::tier::Tier>
    });
    Engine::new(
        source,
        identity,
        (cache, key, store),
        options,
        link,
        counters,
    )
}

/// Where the blocks of the file called `name` go on disk, if the builder
/// has a disk cache and the file a validator to tell its versions apart;
/// notes the version as the file's latest, confirmed now, if an answer of
/// the server `confirmed` it (with how long it said the version stays
/// good).
fn disk_file(
    builder: &Builder,
    name: &disk::Name,
    identity: &Identity,
    confirmed: Option<Freshness>,
) -> Option<DiskFile> {
    let disk = builder.disk_cache.as_ref()?;
    let Some(version) = disk::version(name, identity) else {
        tracing::debug!(
            "disk cache: the file has neither a strong ETag nor Last-Modified, so its blocks \
             cannot be validated and stay off the disk"
        );
        return None;
    };
    if let Some(freshness) = confirmed {
        disk.remember(name, identity, freshness);
    }
    Some(disk.file(version, builder.block_size).named(name.clone()))
}

/// What the disk holds of a file for a warm open: the version seen last and
/// its first block.
struct Warm {
    known: Recalled,
    first: Vec<u8>,
    /// The version was confirmed by the server while this open waited for
    /// another process's first open of the file (its record was written
    /// meanwhile): as good as an answer to a request of this open's own,
    /// which would have come no earlier.
    confirmed_meanwhile: bool,
    /// The version was confirmed with this open's credentials (see
    /// [`disk::Name`]): else it is asked about, whatever was said of it.
    may_trust: bool,
}

/// What the disk holds of the file at `url` for a warm open, if anything;
/// if nothing, this open's claim on the file's first open, if it has it.
///
/// Processes opening a file the disk does not hold at the same moment fetch
/// it once: one claims the first open and fetches, the others wait until
/// its first blocks are on disk and open it warm, without a request of
/// their own (the version was confirmed during their open).
fn look_on_disk(
    builder: &Builder,
    name: &disk::Name,
    stop: &Stop,
) -> Result<(Option<Warm>, Option<FetchLock>)> {
    let Some(disk) = builder.disk_cache.as_ref() else {
        return Ok((None, None));
    };
    let first_block = |known: Recalled, confirmed_meanwhile| {
        let first_len = builder.block_size.min(known.identity.size);
        let first = disk
            .file(known.version, builder.block_size)
            .read(0, first_len)?;
        Some(Warm {
            may_trust: name.may_trust(&known),
            known,
            first,
            confirmed_meanwhile,
        })
    };
    let before = disk.recall(name);
    if let Some(warm) = before.clone().and_then(|known| first_block(known, false)) {
        return Ok((Some(warm), None));
    }
    // The wait for another process's first open has a read's time of its
    // own; each request after it has its own again.
    let stop = &stop.until(crate::wait::deadline::after(builder.read_timeout));
    for _ in 0..FIRST_OPEN_ROUNDS {
        let (lock, let_go) = match disk.claim_first_open(name, stop)? {
            FirstOpen::Ours(lock) => (Some(lock), false),
            FirstOpen::Waited => (None, true),
            FirstOpen::StillHeld => (None, false),
            FirstOpen::Unclaimed => return Ok((None, None)),
        };
        // Looked at again: the claim may have been let go just before it
        // was asked for, the first block on disk by then.
        let after = disk.recall(name);
        let meanwhile = confirmed_meanwhile(before.as_ref(), after.as_ref());
        match after.and_then(|known| first_block(known, meanwhile)) {
            // The claim, if taken, is let go at once: nothing to fetch.
            Some(warm) => return Ok((Some(warm), None)),
            // Let go of with nothing on disk (its open failed, or its
            // process ended): claimed again, so that one of the processes
            // that waited opens the file and the others wait once more,
            // rather than each fetching its first block.
            None if let_go => {}
            None => return Ok((None, lock)),
        }
    }
    Ok((None, None))
}

/// How many times an open claims the first open of a file whose claim was
/// let go of with nothing on disk, before it opens the file unclaimed.
const FIRST_OPEN_ROUNDS: usize = 4;

/// Whether the record `after` a wait for another process's first open
/// (or a claim of it) was written meanwhile, rather than being the one
/// seen `before` (or none): then the server confirmed its version during
/// this open. The first open writes its record only once its first blocks
/// are on disk, just before it lets go of its claim (see
/// [`DiskCache::remember_after_writes`](crate::disk::DiskCache::remember_after_writes)),
/// so a process that waited for it finds the record new.
fn confirmed_meanwhile(before: Option<&Recalled>, after: Option<&Recalled>) -> bool {
    after.is_some() && after != before
}

/// Opens a file whose last version seen, and its first block, are on disk:
/// with no request if that version is trusted (see [`freshness`]), else
/// with one that asks the server to send nothing if the file is still that
/// version (`304 Not Modified`), and gives the file as the server sends it
/// if it changed. With whether the server was asked.
fn warm_open(
    builder: &Builder,
    transport: &Transport,
    warm: Warm,
    (name, asked_at): (&disk::Name, &Url),
    stop: &Stop,
) -> Result<(Opened, bool)> {
    let Warm {
        known,
        first,
        confirmed_meanwhile,
        may_trust,
    } = warm;
    let via = known.via;
    let trust = Trust {
        immutable: builder.immutable,
        revalidate_after: builder.revalidate_after,
    };
    // A time in the future (a clock set back) says nothing of when.
    let since = known.seen.elapsed().ok();
    let on_disk = Opened {
        identity: known.identity,
        first,
        freshness: known.freshness,
    };
    let trusted = confirmed_meanwhile || freshness::is_trusted(trust, known.freshness, since);
    if may_trust && trusted {
        return Ok((on_disk, false));
    }
    // A whole first block is asked for, not the known version's: if the
    // file changed, its size may have too.
    let opened = match transport.open_unless(builder.block_size, &on_disk.identity, stop)? {
        // A 304 that says nothing of freshness leaves what was said before
        // standing.
        // A 304 from where the URL led before: the version on disk.
        Revalidated::Unchanged { freshness, .. }
            if name.via_to(asked_at, &transport.target()) == via =>
        {
            Opened {
                freshness: freshness.unwrap_or(on_disk.freshness),
                ..on_disk
            }
        }
        // From elsewhere, it says nothing of the file on disk.
        Revalidated::Unchanged { .. } => transport.open(builder.block_size, stop)?,
        Revalidated::Changed(changed) => changed,
    };
    Ok((opened, true))
}

/// The transport for `url`, with the builder's agent, headers, timeouts and
/// retry policy, and the storage service's part in requests (with how
/// messages name the file), if any.
fn transport(
    builder: &Builder,
    url: Url,
    service: Option<(Arc<dyn Service>, String)>,
    link: &Arc<LinkMeter>,
    counters: &Arc<Counters>,
) -> Result<Transport> {
    let agent = http::agent(&http::AgentSettings {
        given: builder.agent.as_ref(),
        extra_roots: &builder.extra_roots,
        proxy_from_env: builder.proxy_from_env,
    })?;
    let config = TransportConfig {
        agent,
        headers: builder.headers.clone(),
        user_agent: builder.user_agent.clone(),
        timeouts: Timeouts {
            connect: builder.connect_timeout,
            idle: builder.idle_timeout,
            per_read: builder.read_timeout,
        },
        retry: builder.retry,
        https_only: builder.https_only,
        allow_redirect_to_http: builder.allow_redirect_to_http,
        max_redirects: builder.max_redirects,
        max_connections: builder.max_connections as usize,
        url_provider: builder.url_provider.clone(),
        link: link.clone(),
        shown_as: service.as_ref().map(|(_, shown)| shown.clone()),
        service: service.map(|(service, _)| service),
    };
    Ok(Transport::new(url, config, counters.clone()))
}

/// The opening request, and the tail request beside it (if `tail_len` is
/// not 0): one round trip for both.
fn first_request(
    transport: &Transport,
    first_len: u64,
    tail_len: u64,
    stop: &Stop,
) -> (Result<Opened>, Option<Result<Tail>>) {
    if tail_len == 0 {
        return (transport.open(first_len, stop), None);
    }
    std::thread::scope(|s| {
        // Without a thread, the file opens without its tail.
        let tail =
            crate::engine::fanout::try_spawn(s, stop, |helper| transport.tail(tail_len, helper));
        let opened = transport.open(first_len, stop);
        (opened, tail.and_then(|t| t.join().ok()))
    })
}

/// The tail, if it was fetched and is of the same file version as the head;
/// otherwise it is dropped (it is an optimisation only).
fn matching_tail(tail: Result<Tail>, head: &Identity, transport: &Transport) -> Option<Tail> {
    match tail {
        Ok(tail) if tail.identity == *head => Some(tail),
        Ok(_) => {
            tracing::debug!(url = %transport.redacted_url(), "the file's tail does not match its head; dropped");
            None
        }
        Err(e) => {
            tracing::debug!(error = %e, "fetching the file's tail failed; dropped");
            None
        }
    }
}

/// The whole blocks in the tail (the last one may end at the end of the
/// file), by index.
fn tail_blocks(tail: Tail, block_size: u64) -> Vec<(u64, Vec<u8>)> {
    let size = tail.identity.size;
    plan::blocks_within(tail.start..size, block_size)
        .map(|i| {
            let block = plan::block_bytes(i, block_size, size);
            let at = (block.start - tail.start) as usize..(block.end - tail.start) as usize;
            (i, tail.bytes[at].to_vec())
        })
        .collect()
}

/// What identifies one version of one file, cut into blocks of one size, in
/// a cache: files of one URL opened with different block sizes share a
/// cache but not its blocks (block `i` of one is not block `i` of another).
#[derive(Hash)]
struct Version<'a> {
    url: &'a str,
    identity: &'a Identity,
    block_size: u64,
}

fn file_key(cache: &BlockCache, url: &Url, identity: &Identity, block_size: u64) -> FileKey {
    cache.file_key(&Version {
        url: url.as_str(),
        identity,
        block_size,
    })
}

/// The engine's sizes: the builder's, bounded by the cache they work in.
fn read_options(builder: &Builder, cache: &BlockCache) -> ReadOptions {
    let quarter = cache.capacity() / 4;
    let read_ahead_max = builder.read_ahead_max.min(quarter);
    ReadOptions {
        block_size: builder.block_size,
        read_ahead_min: builder.read_ahead_min.min(read_ahead_max),
        read_ahead_max,
        max_concurrency: builder.max_concurrent_requests,
        // The connections a read may use stay free for reads.
        guess_concurrency: (builder
            .max_connections
            .saturating_sub(builder.max_concurrent_requests))
        .max(builder.max_concurrent_requests),
        split_size: builder.split_size,
        coalesce_gap: builder.coalesce_gap,
        bypass_min: builder.cache_bypass.unwrap_or(quarter).max(1),
        read_timeout: builder.read_timeout,
    }
}

fn parse_url(text: &str, https_only: bool) -> Result<Url> {
    let url = Url::parse(text).map_err(|e| {
        let hint = match e {
            url::ParseError::RelativeUrlWithoutBase => {
                " (a URL starts with https://, http:// or s3://)"
            }
            _ => "",
        };
        Error::new(
            ErrorKind::InvalidUrl,
            format!("invalid URL `{}`: {e}{hint}", shown_input(text)),
        )
    })?;
    match url.scheme() {
        "https" => {}
        "http" if !https_only => {}
        "http" => {
            return Err(Error::new(
                ErrorKind::InvalidUrl,
                "refusing a plain http URL (https_only is set)",
            ));
        }
        other => {
            return Err(Error::new(
                ErrorKind::InvalidUrl,
                format!("unsupported URL scheme {other:?}: only http, https and s3"),
            ));
        }
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(Error::new(ErrorKind::InvalidUrl, "the URL has no host"));
    }
    Ok(url)
}

/// `text`, which is no URL, as a message may quote it: without what comes
/// before its last `@` (where a password goes, which may hold a `?` or a
/// `#`), then without a query or fragment (where signatures go), printable
/// and short.
fn shown_input(text: &str) -> String {
    let (hidden, rest) = match text.rfind('@') {
        Some(at) => ("…", &text[at..]),
        None => ("", text),
    };
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    let cut = if end < rest.len() { "…" } else { "" };
    let shown = crate::http::redact::printable_excerpt(&rest.as_bytes()[..end], 200);
    format!("{hidden}{shown}{cut}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_url_is_quoted_once_without_its_secrets() {
        let e = parse_url("not a url", false).unwrap_err().to_string();
        assert_eq!(e.matches("`not a url`").count(), 1, "{e}");
        assert!(e.contains("https://"), "says what a URL looks like: {e}");
        let e = parse_url("http://me:hunter2@[::1/x?X-Amz-Signature=abc", false)
            .unwrap_err()
            .to_string();
        assert!(!e.contains("hunter2") && !e.contains("abc"), "{e}");
        assert!(e.contains("`…@[::1/x…`"), "{e}");
        for password in ["hunt?er2", "hunt#er2"] {
            let e = parse_url(&format!("https://user:{password}@host/x"), false)
                .unwrap_err()
                .to_string();
            assert!(!e.contains("hunt") && e.contains("`…@host/x`"), "{e}");
        }
    }

    #[test]
    fn urls_are_checked() {
        for bad in ["ftp://h/x", "file:///etc/passwd", "not a url", "http://"] {
            let e = parse_url(bad, false).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidUrl, "{bad}");
        }
        assert_eq!(
            parse_url("http://h/x", true).unwrap_err().kind(),
            ErrorKind::InvalidUrl
        );
        assert!(parse_url("https://h/x", true).is_ok());
    }

    fn identity(size: u64, etag: Option<&str>) -> Identity {
        Identity {
            size,
            etag: etag.map(str::to_owned),
            last_modified: None,
        }
    }

    #[test]
    fn a_record_written_while_an_open_waited_was_confirmed_meanwhile() {
        let at = |secs| Recalled {
            identity: identity(10, Some("\"a\"")),
            version: [0; 32],
            seen: std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs),
            freshness: Freshness::Ask,
            asked_with: None,
            via: None,
        };
        let (old, new) = (at(1), at(2));
        assert!(confirmed_meanwhile(None, Some(&new)), "the first record");
        assert!(confirmed_meanwhile(Some(&old), Some(&new)), "written again");
        let changed = Recalled {
            version: [1; 32],
            ..new.clone()
        };
        assert!(
            confirmed_meanwhile(Some(&new), Some(&changed)),
            "another version"
        );
        // The holder gave up, or wrote nothing: the version seen is asked
        // about as ever.
        assert!(!confirmed_meanwhile(Some(&old), Some(&old)));
        assert!(!confirmed_meanwhile(None, None));
        assert!(!confirmed_meanwhile(Some(&old), None));
    }

    #[test]
    fn a_tail_gives_its_whole_blocks() {
        let tail = Tail {
            identity: identity(10, None),
            start: 3,
            bytes: b"3456789".to_vec(),
        };
        let blocks = tail_blocks(tail, 4);
        assert_eq!(blocks, [(1, b"4567".to_vec()), (2, b"89".to_vec())]);
    }

    #[test]
    fn versions_of_a_file_and_its_block_sizes_have_their_own_keys() {
        let cache = BlockCache::new(1 << 20);
        let url = Url::parse("https://h/f.h5").unwrap();
        let other = Url::parse("https://h/g.h5").unwrap();
        let key = |url, size, etag| file_key(&cache, url, &identity(size, Some(etag)), 4096);
        let a = key(&url, 10, "\"a\"");
        assert_eq!(a, key(&url, 10, "\"a\""));
        assert_ne!(a, key(&url, 10, "\"b\""));
        assert_ne!(a, key(&url, 11, "\"a\""));
        assert_ne!(a, key(&other, 10, "\"a\""));
        let identity = identity(10, Some("\"a\""));
        assert_ne!(a, file_key(&cache, &url, &identity, 8192));
    }
}
