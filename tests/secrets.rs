//! Nothing secret at rest, nothing secret in an error message: secrets
//! planted in a URL's query, its user information, a header and a cache key
//! are looked for in every file a disk cache wrote (plain, in other case,
//! percent-encoded, hexadecimal, base64 at every alignment, UTF-16) and in
//! every error a failing server or a refused connection gives.

use std::path::{Path, PathBuf};
use std::time::Duration;

use remfile::{DiskCache, RemoteFile};
use remfile_testkit::{RangeServer, Reply, TempDir, builder, read_at as read, test_data};

const BLOCK: u64 = 64 * 1024;

/// In the query, as an OAuth 2 bearer token.
const ACCESS_TOKEN: &str = "PLANTED1";
/// In the query, as an API key.
const API_KEY: &str = "PLANTED2";
/// In a header.
const HEADER_VALUE: &str = "PLANTED3";
/// In the URL's user information.
const PASSWORD: &str = "PLANTED4";
/// In the query, under a name no rule knows.
const OTHER_TOKEN: &str = "PLANTED5";
/// The builder's cache key.
const CACHE_KEY: &str = "PLANTED6";

const PLANTED: [&str; 6] = [
    ACCESS_TOKEN,
    API_KEY,
    HEADER_VALUE,
    PASSWORD,
    OTHER_TOKEN,
    CACHE_KEY,
];

/// `path` on `server` with the access token and API key in its query.
fn secret_url(server: &RangeServer, path: &str, token: &str) -> String {
    let url = server.url(&format!("{path}?access_token={token}&api_key={API_KEY}"));
    url.replacen("http://", &format!("http://me:{PASSWORD}@"), 1)
}

/// A builder that sends the planted header.
fn with_header() -> remfile::Builder {
    builder()
        .block_size(BLOCK)
        .header("X-Api-Key", HEADER_VALUE)
}

fn open_cached(url: &str, dir: &Path) -> RemoteFile {
    with_header()
        .disk_cache(DiskCache::open(dir, 64 << 20).unwrap())
        .open(url)
        .unwrap()
}

/// Standard base64.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from_be_bytes([0, b[0], b[1], b[2]]);
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// Every form in which `secret` is looked for: itself, in lower case,
/// percent-encoded, in hexadecimal, in UTF-16, and the part of its base64
/// (standard or URL-safe) that does not depend on its neighbours, at each
/// of the three offsets it may start at.
fn forms(secret: &str) -> Vec<Vec<u8>> {
    let mut forms = vec![
        secret.as_bytes().to_vec(),
        secret.to_ascii_lowercase().into_bytes(),
        secret
            .bytes()
            .map(|b| format!("%{b:02X}"))
            .collect::<String>()
            .into_bytes(),
        secret
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
            .into_bytes(),
        secret
            .bytes()
            .map(|b| format!("{b:02X}"))
            .collect::<String>()
            .into_bytes(),
        secret.encode_utf16().flat_map(u16::to_le_bytes).collect(),
        secret.encode_utf16().flat_map(u16::to_be_bytes).collect(),
    ];
    for offset in 0..3 {
        let mut shifted = vec![0u8; offset];
        shifted.extend_from_slice(secret.as_bytes());
        let encoded = base64(&shifted);
        let first_group = offset.div_ceil(3);
        let last_group = shifted.len() / 3;
        let stable = &encoded[4 * first_group..4 * last_group];
        forms.push(stable.as_bytes().to_vec());
        forms.push(stable.replace('+', "-").replace('/', "_").into_bytes());
    }
    forms
}

/// Every regular file under `dir`, links not followed.
fn every_file(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let kind = e.file_type().unwrap();
            if kind.is_dir() {
                todo.push(e.path());
            } else if kind.is_file() {
                out.push(e.path());
            }
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Asserts that no file under `dir`, by its name or its bytes, holds any
/// form of any of `secrets`; returns how many files were looked at.
fn assert_nothing_of(secrets: &[&str], dir: &Path) -> usize {
    let files = every_file(dir);
    for path in &files {
        let bytes = std::fs::read(path).unwrap();
        let name = path
            .strip_prefix(dir)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        for secret in secrets {
            for form in forms(secret) {
                let shown = String::from_utf8_lossy(&form);
                assert!(!contains(&bytes, &form), "{shown} ({secret}) in {name}");
                assert!(
                    !contains(name.as_bytes(), &form),
                    "{shown} in the name {name}"
                );
            }
        }
    }
    files.len()
}

#[test]
fn the_forms_looked_for_are_found_where_they_are() {
    let secret = "PLANTED1";
    for wrapped in [
        format!("x{}y", base64(format!("a:{secret}").as_bytes())),
        base64(format!("ab:{secret}!").as_bytes()),
        "%50%4C%41%4E%54%45%44%31".to_owned(),
        "504c414e54454431".to_owned(),
    ] {
        assert!(
            forms(secret)
                .iter()
                .any(|f| contains(wrapped.as_bytes(), f)),
            "{wrapped}"
        );
    }
}

#[test]
fn no_secret_of_a_url_header_or_cache_key_is_written_to_the_disk_cache() {
    let data = test_data(1 << 20, 91);
    let server = RangeServer::new(data.clone());
    let dir = TempDir::new("secrets-disk");
    let url = secret_url(&server, "/data/f.nwb", ACCESS_TOKEN);
    let file = open_cached(&url, &dir);
    assert_eq!(read(&file, 100_000, 300_000), &data[100_000..400_000]);
    assert!(
        server
            .log()
            .iter()
            .all(|r| r.header("x-api-key") == Some(HEADER_VALUE)),
        "the header was sent"
    );
    // Dropped: its blocks are on disk.
    drop(file);
    // A file with a date only (its query then names its blocks), a token
    // under a name no rule knows in it.
    let dated = RangeServer::new(test_data(300_000, 92));
    dated.set_etag(None);
    dated.set_last_modified(Some("Tue, 01 Dec 2026 00:00:00 GMT"));
    let dated_url = secret_url(&dated, "/download", ACCESS_TOKEN)
        .replace("?", &format!("?id=1&token={OTHER_TOKEN}&"));
    read(&open_cached(&dated_url, &dir), 0, 200_000);
    // And one under a cache key.
    let keyed = with_header()
        .disk_cache(DiskCache::open(&dir, 64 << 20).unwrap())
        .cache_key(format!("asset-{CACHE_KEY}"))
        .open(server.url("/by-key"))
        .unwrap();
    read(&keyed, 0, 1000);
    drop(keyed);
    let written = assert_nothing_of(&PLANTED, &dir);
    assert!(written >= 12, "blocks and records: {written}");
    // Nor anything else of the URLs: their paths and the server's address.
    let address = server.addr().to_string();
    assert_nothing_of(&["data/f.nwb", "download", "by-key", &address], &dir);
}

#[test]
fn another_access_token_for_the_same_file_reads_from_the_disk_cache() {
    let data = test_data(1 << 20, 93);
    let server = RangeServer::new(data.clone());
    let dir = TempDir::new("secrets-rotated");
    let first = open_cached(&secret_url(&server, "/f", ACCESS_TOKEN), &dir);
    read(&first, 200_000, 400_000);
    drop(first);
    let before = server.requests();
    let rotated = open_cached(&secret_url(&server, "/f", "ROTATED-TOKEN"), &dir);
    assert_eq!(read(&rotated, 200_000, 400_000), &data[200_000..600_000]);
    let asked = &server.log()[before..];
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(
        asked[0].header("if-none-match"),
        Some("\"v1\""),
        "validation only"
    );
    assert!(asked[0].query.as_deref().unwrap().contains("ROTATED-TOKEN"));
    let stats = rotated.stats();
    assert!(stats.disk_hits > 0, "{stats:?}");
    assert_eq!(stats.requests, 1, "{stats:?}");
    // A parameter under a name not declared a credential names the
    // object: another value is another object, with blocks of its own (the
    // same ETag never makes two objects share them).
    drop(rotated);
    let url = |t: &str| server.url(&format!("/f?t={t}"));
    read(&open_cached(&url("ONE"), &dir), 200_000, 400_000);
    let other = open_cached(&url("TWO"), &dir);
    assert_eq!(read(&other, 200_000, 400_000), &data[200_000..600_000]);
    assert_eq!(other.stats().disk_hits, 0);
}

/// Asserts that nothing `error` shows (as itself, as an I/O error, its
/// body excerpt and its URL) holds a planted secret.
fn assert_error_shows_nothing(error: &remfile::Error, what: &str) {
    let io: std::io::Error = error.clone().into();
    let shown = [
        error.to_string(),
        format!("{error:?}"),
        format!("{error:#?}"),
        io.to_string(),
        format!("{io:?}"),
        error.body_excerpt().unwrap_or_default().to_owned(),
        error.url().unwrap_or_default().to_owned(),
    ];
    for text in shown {
        for secret in PLANTED {
            assert!(!text.contains(secret), "{what}: {secret} in {text}");
        }
    }
}

/// A server's error body that echoes the request's secrets every way an
/// API does.
fn echoing_body() -> String {
    format!(
        "{{\"error\":\"internal\",\"access_token\":\"{ACCESS_TOKEN}\",\
         \"request\":{{\"url\":\"/f?access_token={ACCESS_TOKEN}&api_key={API_KEY}\",\
         \"headers\":{{\"X-Api-Key\":\"{HEADER_VALUE}\",\"Authorization\":\"Basic {PASSWORD}\"}}}}}}\n\
         X-Api-Key: {HEADER_VALUE}\r\nAuthorization: Bearer {ACCESS_TOKEN}\r\n\
         retry with Bearer {HEADER_VALUE} at http://me:{PASSWORD}@h/f?api_key={API_KEY}"
    )
}

#[test]
fn no_error_shows_a_secret() {
    let data = test_data(1 << 20, 94);
    let body = echoing_body();
    let server = RangeServer::new(data).with_hook(move |req, reply| match req.path.as_str() {
        "/missing" => {
            Reply::new(404).body(format!("no {} here", req.query.clone().unwrap_or_default()))
        }
        "/failing" => Reply::new(500).body(body.clone()),
        "/later" if req.range().is_some_and(|(first, _)| first > 0) => {
            Reply::new(403).body(body.clone())
        }
        _ => reply,
    });
    let dir = TempDir::new("secrets-errors");
    let open = |path: &str| {
        with_header()
            .disk_cache(DiskCache::open(&dir, 64 << 20).unwrap())
            .open(secret_url(&server, path, ACCESS_TOKEN))
    };
    let missing = open("/missing").unwrap_err();
    assert_eq!(missing.status(), Some(404), "{missing}");
    assert_error_shows_nothing(&missing, "404");
    let failing = open("/failing").unwrap_err();
    assert_eq!(failing.status(), Some(500), "{failing}");
    assert!(
        failing.body_excerpt().unwrap().contains("internal"),
        "{failing}"
    );
    assert_error_shows_nothing(&failing, "500");
    // A read that fails after the open.
    let later = open("/later").unwrap();
    let mut buf = [0u8; 10];
    let refused = later.read_exact_at(500_000, &mut buf).unwrap_err();
    assert_eq!(refused.status(), Some(403), "{refused}");
    assert_error_shows_nothing(&refused, "403 on a read");
    for text in [format!("{later:?}"), later.url().to_owned()] {
        for secret in PLANTED {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
    }
    // A connection refused: a port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let url = format!(
        "http://me:{PASSWORD}@127.0.0.1:{port}/f?access_token={ACCESS_TOKEN}&api_key={API_KEY}"
    );
    let unreachable = with_header()
        .connect_timeout(Duration::from_secs(1))
        .open(&url)
        .unwrap_err();
    assert_error_shows_nothing(&unreachable, "a refused connection");
    let shown = format!("{:?}", with_header());
    assert!(
        !shown.contains(HEADER_VALUE),
        "the header's value in {shown}"
    );
    // And none of it in what the disk cache wrote meanwhile.
    assert_nothing_of(&PLANTED, &dir);
}
