//! Redirects: followed and counted by the crate, remembered, kept from
//! leaking credentials, and renewed when a presigned target expires.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use remfile::ErrorKind;
use remfile_testkit::{RangeServer, Reply, builder, test_data};

const MIB: u64 = 1024 * 1024;

#[test]
fn a_302_is_followed_once_then_skipped() {
    let data = test_data(4 * MIB as usize, 1);
    let server = RangeServer::new(data.clone()).with_hook(|req, r| {
        if req.path == "/start" {
            Reply::redirect(302, "/real/file")
        } else {
            r
        }
    });
    let file = builder().open(server.url("/start")).unwrap();
    assert_eq!(file.len(), data.len() as u64);
    assert_eq!(file.url(), server.url("/start"));
    let mut buf = vec![0; 1000];
    file.read_exact_at(2 * MIB, &mut buf).unwrap();
    assert_eq!(buf, data[2 * MIB as usize..][..1000]);
    let paths: Vec<String> = server.log().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/start", "/real/file", "/real/file"]);
    // The range went along with the redirect.
    assert_eq!(server.log()[1].header("range"), Some("bytes=0-1048575"));
    let s = file.stats();
    assert_eq!((s.requests, s.round_trips), (3, 3));
}

#[test]
fn a_redirect_loop_stops_at_the_limit() {
    let server = RangeServer::new(test_data(10, 2)).with_hook(|req, _| {
        let next = if req.path == "/a" { "/b" } else { "/a" };
        Reply::redirect(307, next)
    });
    let e = builder()
        .max_redirects(5)
        .open(server.url("/a"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Redirect, "{e}");
    assert_eq!(server.requests(), 6);
}

#[test]
fn a_redirect_without_location_is_an_error() {
    let server = RangeServer::new(test_data(10, 3)).with_hook(|_, _| Reply::new(302));
    let e = builder().open(server.url("/a")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Redirect, "{e}");
}

#[test]
fn credentials_do_not_follow_a_redirect_to_another_port() {
    let data = test_data(2 * MIB as usize, 4);
    let storage = RangeServer::new(data.clone());
    let target = storage.url("/blob");
    let api = RangeServer::new(Vec::new()).with_hook(move |_, _| Reply::redirect(302, &target));
    let file = builder()
        .header("Authorization", "Bearer secret")
        .open(api.url("/files/1"))
        .unwrap();
    let mut buf = [0u8; 100];
    file.read_exact_at(MIB, &mut buf).unwrap();
    assert_eq!(buf, data[MIB as usize..][..100]);
    assert_eq!(api.log()[0].header("authorization"), Some("Bearer secret"));
    assert_eq!(storage.requests(), 2);
    for req in storage.log() {
        assert!(
            req.header("authorization").is_none(),
            "leaked to another origin"
        );
        assert!(req.header("user-agent").is_some());
    }
}

#[test]
fn an_expired_presigned_target_is_resolved_again() {
    // The API signs a new storage URL on each call; a signature is good for
    // two requests, then the storage answers 403.
    let data = test_data(6 * MIB as usize, 5);
    let signed = Arc::new(AtomicUsize::new(0));
    let used = Arc::new(parking_lot::Mutex::new(std::collections::HashMap::<
        String,
        usize,
    >::new()));
    let (s, u) = (signed.clone(), used.clone());
    let server = RangeServer::new(data.clone()).with_hook(move |req, r| {
        if req.path == "/api/asset" {
            let n = s.fetch_add(1, Ordering::SeqCst);
            return Reply::redirect(302, &format!("/store/blob?X-Signature=SECRET{n}"));
        }
        let sig = req.query.clone().unwrap_or_default();
        let mut used = u.lock();
        let count = used.entry(sig).or_insert(0);
        *count += 1;
        if *count > 2 {
            Reply::new(403).body("<Error>Request has expired</Error>")
        } else {
            r
        }
    });
    let file = builder()
        .read_ahead_max(0)
        .open(server.url("/api/asset"))
        .unwrap();
    let mut buf = vec![0; 1000];
    for k in 1..6u64 {
        file.read_exact_at(k * MIB, &mut buf).unwrap();
        assert_eq!(buf, data[(k * MIB) as usize..][..1000]);
    }
    assert!(signed.load(Ordering::SeqCst) >= 3, "re-resolved");
    assert_eq!(file.stats().requests as usize, server.requests());
}

#[test]
fn a_re_resolved_target_serving_another_file_is_refused() {
    let data = test_data(3 * MIB as usize, 6);
    let other = test_data(5 * MIB as usize, 7);
    let resolutions = Arc::new(AtomicUsize::new(0));
    let r2 = resolutions.clone();
    let server = RangeServer::new(data.clone()).with_hook(move |req, r| match req.path.as_str() {
        "/api" => {
            let n = r2.fetch_add(1, Ordering::SeqCst);
            Reply::redirect(302, if n == 0 { "/old?sig=1" } else { "/new?sig=2" })
        }
        "/old" if req.n > 2 => Reply::new(403),
        "/new" => {
            let (first, last) = req.range().unwrap();
            let last = last.min(other.len() as u64 - 1);
            Reply::new(206)
                .header(
                    "Content-Range",
                    format!("bytes {first}-{last}/{}", other.len()),
                )
                .header("ETag", "\"v1\"")
                .body(&other[first as usize..=last as usize])
        }
        _ => r,
    });
    let file = builder().open(server.url("/api")).unwrap();
    let mut buf = [0u8; 10];
    let e = file.read_exact_at(2 * MIB, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RemoteChanged, "{e}");
}

#[test]
fn a_signed_url_refused_without_a_redirect_says_it_may_have_expired() {
    let server = RangeServer::new(test_data(10, 8))
        .with_hook(|_, _| Reply::new(403).body("<Error><Code>AccessDenied</Code></Error>"));
    let e = builder()
        .open(server.url("/blob?X-Amz-Signature=TOPSECRET"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::HttpStatus(403));
    let text = e.to_string();
    assert!(text.contains("expired"), "{text}");
    assert!(text.contains("AccessDenied"), "{text}");
    assert!(!text.contains("TOPSECRET"), "{text}");
    assert!(!format!("{e:?}").contains("TOPSECRET"));
    let io: std::io::Error = e.into();
    assert_eq!(io.kind(), std::io::ErrorKind::PermissionDenied);
}

/// A storage server whose signatures (`?sig=N`) are good for `uses` requests.
fn expiring_store(data: Vec<u8>, uses: usize) -> RangeServer {
    let used = Arc::new(parking_lot::Mutex::new(std::collections::HashMap::<
        String,
        usize,
    >::new()));
    RangeServer::new(data).with_hook(move |req, r| {
        let sig = req.query.clone().unwrap_or_default();
        let mut used = used.lock();
        let count = used.entry(sig).or_insert(0);
        *count += 1;
        if *count > uses {
            Reply::new(403).body(
                "<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>",
            )
        } else {
            r
        }
    })
}

#[test]
fn a_url_provider_renews_an_expired_url() {
    let data = test_data(6 * MIB as usize, 9);
    let server = expiring_store(data.clone(), 2);
    let calls = Arc::new(AtomicUsize::new(0));
    let (c, base) = (calls.clone(), server.url("/blob"));
    let provider = move || {
        let n = c.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(format!("{base}?sig=S{n}"))
    };
    let file = builder()
        .read_ahead_max(0)
        .url_provider(provider)
        .open(server.url("/blob?sig=S0"))
        .unwrap();
    let mut buf = vec![0; 1000];
    for k in 1..6u64 {
        file.read_exact_at(k * MIB, &mut buf).unwrap();
        assert_eq!(buf, data[(k * MIB) as usize..][..1000]);
    }
    // Five reads after the open, two requests a signature: two renewals.
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(file.stats().requests as usize, server.requests());
    assert_eq!(
        file.url(),
        server.url("/blob?…"),
        "the URL shown stays redacted"
    );
}

#[test]
fn a_renewed_url_serving_another_file_is_refused() {
    let data = test_data(3 * MIB as usize, 10);
    let server = expiring_store(data, 1);
    let other = RangeServer::new(test_data(3 * MIB as usize + 1, 11));
    let other_url = other.url("/blob?sig=x");
    let file = builder()
        .url_provider(move || Ok(other_url.clone()))
        .open(server.url("/blob?sig=first"))
        .unwrap();
    let mut buf = [0u8; 10];
    let e = file.read_exact_at(2 * MIB, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RemoteChanged, "{e}");
}

#[test]
fn headers_stay_with_the_origin_they_were_given_for_when_the_url_is_renewed() {
    let data = test_data(3 * MIB as usize, 14);
    let server = expiring_store(data.clone(), 1);
    // The same file on another host, which must never see the token.
    let elsewhere = RangeServer::new(data.clone());
    let renewed = elsewhere.url("/blob?sig=fresh");
    let file = builder()
        .header("Authorization", "Bearer TOKEN")
        .read_ahead_max(0)
        .url_provider(move || Ok(renewed.clone()))
        .open(server.url("/blob?sig=first"))
        .unwrap();
    let mut buf = [0u8; 10];
    file.read_exact_at(2 * MIB, &mut buf).unwrap();
    assert_eq!(buf, data[2 * MIB as usize..][..10]);
    assert!(elsewhere.requests() > 0, "the renewed URL was used");
    assert!(
        elsewhere
            .log()
            .iter()
            .all(|r| r.header("authorization").is_none()),
        "the header went to another origin"
    );
    assert!(
        server
            .log()
            .iter()
            .all(|r| r.header("authorization") == Some("Bearer TOKEN"))
    );
}

#[test]
fn a_failing_url_provider_is_reported() {
    let server = expiring_store(test_data(3 * MIB as usize, 12), 1);
    let file = builder()
        .url_provider(|| Err("the signing service is down".into()))
        .open(server.url("/blob?sig=first"))
        .unwrap();
    let mut buf = [0u8; 10];
    let e = file.read_exact_at(2 * MIB, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::HttpStatus(403));
    assert!(e.to_string().contains("signing service is down"), "{e}");
}

#[test]
fn a_url_refused_at_open_is_not_renewed() {
    let server = expiring_store(test_data(1000, 13), 0);
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let e = builder()
        .url_provider(move || {
            c.fetch_add(1, Ordering::SeqCst);
            Ok("http://127.0.0.1:9/never".into())
        })
        .open(server.url("/blob?sig=dead"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::HttpStatus(403));
    assert!(e.to_string().contains("expired"), "{e}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[test]
fn the_tail_follows_the_redirect_too() {
    let data = test_data(4 * MIB as usize + 3, 9);
    let server = RangeServer::new(data.clone()).with_hook(|req, r| {
        if req.path == "/start" {
            Reply::redirect(302, "/real/file")
        } else {
            r
        }
    });
    let file = builder()
        .open_tail(MIB + 3)
        .open(server.url("/start"))
        .unwrap();
    let mut buf = vec![0; MIB as usize + 3];
    file.read_exact_at(4 * MIB - MIB, &mut buf).unwrap();
    assert!(buf == data[3 * MIB as usize..]);
    let paths: Vec<String> = server.log().iter().map(|r| r.path.clone()).collect();
    let at = |p: &str| paths.iter().filter(|q| *q == p).count();
    // Both opening requests reached the file, the first through the
    // redirect; the second too, unless it went out once the first had
    // learnt where the file is. The tail served the read.
    assert_eq!(at("/real/file"), 2, "{paths:?}");
    assert!((1..=2).contains(&at("/start")), "{paths:?}");
    assert_eq!(paths.len(), 2 + at("/start"), "{paths:?}");
}
