//! Servers that misbehave: each fault is detected, retried or reported, and a
//! read never returns wrong bytes.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use remfile::{ErrorKind, RetryPolicy};
use remfile_testkit::{After, RangeServer, RawServer, Reply, builder, raw_206, test_data};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

fn quick_retries(n: u32) -> RetryPolicy {
    RetryPolicy::default()
        .max_retries(n)
        .initial_backoff(Duration::from_millis(1))
        .max_backoff(Duration::from_millis(5))
}

#[test]
fn a_server_ignoring_range_is_refused_at_open() {
    let data = test_data(3 * MIB as usize, 1);
    let server = RangeServer::new(data).with_hook(|_, mut r| {
        if r.status == 206 {
            r.status = 200;
            r = r.without("Content-Range");
            r.body = test_data(3 * MIB as usize, 1);
        }
        r
    });
    let e = builder().open(server.url("/f")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RangeNotSupported, "{e}");
    assert_eq!(server.requests(), 1, "not retried");
    let io: std::io::Error = e.into();
    assert_eq!(io.kind(), std::io::ErrorKind::Unsupported);
}

#[test]
fn a_chunked_200_larger_than_a_block_is_refused() {
    let data = test_data(100 * KIB as usize, 2);
    let server = RawServer::new(move |_, out| {
        let _ = out.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        for piece in data.chunks(8192) {
            let _ = write!(out, "{:x}\r\n", piece.len());
            let _ = out.write_all(piece);
            let _ = out.write_all(b"\r\n");
        }
        let _ = out.write_all(b"0\r\n\r\n");
        After::KeepAlive
    });
    let e = builder()
        .block_size(16 * KIB)
        .open(server.url("/f"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RangeNotSupported, "{e}");
}

#[test]
fn a_range_ignored_after_open_is_refused() {
    let data = test_data(3 * MIB as usize, 3);
    let server = RangeServer::new(data.clone());
    let file = builder().open(server.url("/f")).unwrap();
    let whole = data.clone();
    server.set_hook(move |_, mut r| {
        r.status = 200;
        r.without("Content-Range").body(whole.clone())
    });
    let mut buf = [0u8; 10];
    let e = file.read_exact_at(2 * MIB, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RangeNotSupported, "{e}");
}

/// A server of `data` whose second answer announces the whole range, sends
/// 100 000 bytes of it and hangs up.
fn cutting_the_second_body_short(data: &Arc<Vec<u8>>) -> RawServer {
    let d = data.clone();
    RawServer::new(move |req, out| {
        let (first, last) = req.range().unwrap();
        if req.n == 2 {
            let full = raw_206(&d, first, last);
            let head_len = full.len() - (last - first + 1) as usize;
            let _ = out.write_all(&full[..head_len + 100_000]);
            return After::Close;
        }
        let _ = out.write_all(&raw_206(&d, first, last));
        After::KeepAlive
    })
}

#[test]
fn a_body_cut_short_is_resumed_from_its_first_missing_byte() {
    let data = Arc::new(test_data(4 * MIB as usize, 4));
    let server = cutting_the_second_body_short(&data);
    let file = builder().open(server.url("/f")).unwrap();
    let mut buf = vec![0; 2 * MIB as usize];
    file.read_exact_at(MIB, &mut buf).unwrap();
    assert!(buf == data[MIB as usize..][..buf.len()]);
    let s = file.stats();
    assert_eq!((s.requests, s.retries), (3, 1));
    assert_eq!(server.requests(), 3);
    // The resumed request fetched only what was missing.
    assert_eq!(s.bytes_fetched, MIB + 2 * MIB);
}

#[test]
fn a_body_longer_or_shorter_than_its_range_is_malformed() {
    let data = test_data(3 * MIB as usize, 5);
    for trim in [true, false] {
        let server = RangeServer::new(data.clone());
        let file = builder().open(server.url("/f")).unwrap();
        server.set_hook(move |_, mut r| {
            if trim {
                r.body.truncate(r.body.len() - 1);
            } else {
                r.body.push(0);
            }
            r
        });
        let mut buf = [0u8; 10];
        let e = file.read_exact_at(2 * MIB, &mut buf).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MalformedResponse, "{e}");
    }
}

#[test]
fn a_content_range_for_other_bytes_is_malformed_and_not_retried() {
    let data = test_data(3 * MIB as usize, 6);
    let server = RangeServer::new(data.clone());
    let file = builder().open(server.url("/f")).unwrap();
    let size = data.len();
    server.set_hook(move |req, r| {
        let (first, last) = req.range().unwrap();
        let shown = format!("bytes {}-{}/{size}", first + 1, last + 1);
        r.header("Content-Range", shown)
    });
    let mut buf = [0u8; 10];
    let e = file.read_exact_at(MIB, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MalformedResponse, "{e}");
    assert_eq!(server.requests(), 2);
    assert_eq!(e.range(), Some(MIB..2 * MIB));
}

#[test]
fn unparsable_or_missing_content_ranges_are_malformed() {
    let data = test_data(3 * MIB as usize, 7);
    for bad in [
        Some("bytes a-b/c"),
        Some("bytes 0-99999999999999999999999/1"),
        Some("bytes 1048576-2097151/*x"),
        None,
    ] {
        let server = RangeServer::new(data.clone());
        let file = builder().open(server.url("/f")).unwrap();
        server.set_hook(move |_, r| match bad {
            Some(v) => r.header("Content-Range", v),
            None => r.without("Content-Range"),
        });
        let mut buf = [0u8; 10];
        let e = file.read_exact_at(MIB, &mut buf).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MalformedResponse, "{bad:?}: {e}");
    }
}

#[test]
fn a_gzip_encoded_206_is_refused() {
    let data = test_data(3 * MIB as usize, 8);
    let server = RangeServer::new(data).with_hook(|_, r| r.header("Content-Encoding", "gzip"));
    let e = builder().open(server.url("/f")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MalformedResponse, "{e}");
    assert!(e.to_string().contains("gzip"));
    assert_eq!(server.log()[0].header("accept-encoding"), Some("identity"));
}

#[test]
fn two_503s_then_success() {
    let data = test_data(3 * MIB as usize, 9);
    let server = RangeServer::new(data.clone());
    let file = builder()
        .retry_policy(quick_retries(5))
        .open(server.url("/f"))
        .unwrap();
    let failures = Arc::new(AtomicUsize::new(0));
    let f = failures.clone();
    server.set_hook(move |_, r| {
        if f.fetch_add(1, Ordering::SeqCst) < 2 {
            Reply::new(503).body("slow down")
        } else {
            r
        }
    });
    let mut buf = vec![0; 1000];
    file.read_exact_at(2 * MIB, &mut buf).unwrap();
    assert_eq!(buf, data[2 * MIB as usize..][..1000]);
    let s = file.stats();
    assert_eq!((s.requests, s.retries), (4, 2));
    assert_eq!(server.requests(), 4);
}

#[test]
fn a_persistent_503_fails_after_the_policy_is_spent() {
    let server = RangeServer::new(test_data(1000, 10))
        .with_hook(|_, _| Reply::new(503).body("<Error>Service Unavailable</Error>"));
    let e = builder()
        .retry_policy(quick_retries(3))
        .open(server.url("/f"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::HttpStatus(503));
    assert_eq!(e.attempts(), 4);
    assert_eq!(server.requests(), 4);
    assert_eq!(e.body_excerpt(), Some("<Error>Service Unavailable</Error>"));
    assert!(e.is_retryable());
}

#[test]
fn retry_after_is_honoured_and_an_absurd_one_capped() {
    for retry_after in [Some("0"), None, Some("86400")] {
        let data = test_data(1000, 11);
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let server = RangeServer::new(data.clone()).with_hook(move |_, r| {
            if c.fetch_add(1, Ordering::SeqCst) == 0 {
                let reply = Reply::new(429);
                match retry_after {
                    Some(v) => reply.header("Retry-After", v),
                    None => reply,
                }
            } else {
                r
            }
        });
        // Uncapped, a day's wait would outlast the read's deadline and fail.
        let policy = quick_retries(2).max_retry_after(Duration::from_millis(10));
        let file = builder()
            .retry_policy(policy)
            .open(server.url("/f"))
            .unwrap();
        assert_eq!(file.len(), 1000);
        assert_eq!(server.requests(), 2, "{retry_after:?}");
        assert_eq!(file.stats().retries, 1);
    }
}

#[test]
fn a_404_fails_at_once() {
    let server =
        RangeServer::new(test_data(10, 12)).with_hook(|_, _| Reply::new(404).body("no such key"));
    let e = builder().open(server.url("/missing")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::HttpStatus(404));
    assert_eq!(e.status(), Some(404));
    assert_eq!(e.attempts(), 1);
    assert_eq!(server.requests(), 1);
    assert!(e.to_string().contains("404"), "{e}");
    let io: std::io::Error = e.into();
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn other_4xx_are_not_retried() {
    for status in [400, 401, 403, 410] {
        let server = RangeServer::new(test_data(10, 13)).with_hook(move |_, _| Reply::new(status));
        let e = builder().open(server.url("/f")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::HttpStatus(status));
        assert_eq!(server.requests(), 1, "{status}");
    }
}

#[test]
fn a_stalled_server_times_out_instead_of_hanging() {
    let server = RawServer::new(|_, _| {
        remfile_testkit::time::late(Duration::from_secs(3));
        After::Close
    });
    let e = builder()
        .idle_timeout(Duration::from_millis(200))
        .retry_policy(quick_retries(1))
        .open(server.url("/f"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert_eq!(e.attempts(), 2);
    let io: std::io::Error = e.into();
    assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
}

#[test]
fn a_body_stalling_midway_times_out_then_resumes() {
    let data = Arc::new(test_data(3 * MIB as usize, 14));
    let d = data.clone();
    let server = RawServer::new(move |req, out| {
        let (first, last) = req.range().unwrap();
        let full = raw_206(&d, first, last);
        if req.n == 2 {
            let head_len = full.len() - (last - first + 1) as usize;
            let _ = out.write_all(&full[..head_len + 5000]);
            let _ = out.flush();
            remfile_testkit::time::late(Duration::from_secs(2));
            return After::Close;
        }
        let _ = out.write_all(&full);
        After::KeepAlive
    });
    let file = builder()
        .idle_timeout(Duration::from_millis(200))
        .retry_policy(quick_retries(2))
        .open(server.url("/f"))
        .unwrap();
    let mut buf = vec![0; 100_000];
    file.read_exact_at(MIB, &mut buf).unwrap();
    assert!(buf == data[MIB as usize..][..100_000]);
    assert_eq!(file.stats().retries, 1);
    assert_eq!(server.requests(), 3);
}

#[test]
fn the_overall_read_deadline_bounds_retries() {
    let server = RangeServer::new(test_data(10, 15)).with_hook(|_, _| Reply::new(503));
    let e = builder()
        .read_timeout(Duration::from_millis(300))
        .retry_policy(
            RetryPolicy::default()
                .max_retries(1000)
                .initial_backoff(Duration::from_millis(20))
                .max_backoff(Duration::from_millis(20)),
        )
        .open(server.url("/f"))
        .unwrap_err();
    // Usually the last 503; a timeout if the deadline fell inside an attempt.
    assert!(
        matches!(e.kind(), ErrorKind::HttpStatus(503) | ErrorKind::Timeout),
        "{e}"
    );
    assert!(
        e.attempts() < 1000,
        "stopped by the deadline: {}",
        e.attempts()
    );
}

#[test]
fn a_strong_etag_is_sent_as_if_match_and_a_change_is_reported() {
    let data = test_data(3 * MIB as usize, 16);
    let server = RangeServer::new(data.clone());
    let file = builder().open(server.url("/f")).unwrap();
    let mut buf = [0u8; 10];
    file.read_exact_at(MIB, &mut buf).unwrap();
    assert_eq!(server.log()[1].header("if-match"), Some("\"v1\""));
    assert!(server.log()[0].header("if-match").is_none());
    server.set_etag(Some("\"v2\""));
    let e = file.read_exact_at(2 * MIB, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RemoteChanged, "{e}");
    let io: std::io::Error = e.into();
    assert_eq!(io.kind(), std::io::ErrorKind::StaleNetworkFileHandle);
}

#[test]
fn a_changed_etag_is_detected_even_without_if_match() {
    // This server ignores If-Match, so only the comparison can catch the change.
    let data = test_data(3 * MIB as usize, 17);
    let server = RangeServer::new(data.clone()).with_hook(|req, r| {
        if req.n > 1 {
            r.header("ETag", "\"v2\"")
        } else {
            r
        }
    });
    let file = builder().open(server.url("/f")).unwrap();
    let mut buf = [0u8; 10];
    let e = file.read_exact_at(2 * MIB, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RemoteChanged, "{e}");
}

#[test]
fn a_weak_etag_is_compared_not_sent() {
    let data = test_data(3 * MIB as usize, 18);
    let server = RangeServer::new(data.clone());
    server.set_etag(Some("W/\"v1\""));
    let file = builder().open(server.url("/f")).unwrap();
    assert_eq!(file.etag(), Some("W/\"v1\""));
    let mut buf = [0u8; 10];
    file.read_exact_at(MIB, &mut buf).unwrap();
    assert_eq!(buf, data[MIB as usize..][..10]);
    assert!(server.log()[1].header("if-match").is_none());
    server.set_etag(Some("W/\"v2\""));
    let e = file.read_exact_at(2 * MIB, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RemoteChanged, "{e}");
}

#[test]
fn a_changed_last_modified_or_size_is_detected() {
    let data = test_data(3 * MIB as usize, 19);
    let server = RangeServer::new(data.clone());
    server.set_etag(None);
    server.set_last_modified(Some("Mon, 01 Jan 2024 00:00:00 GMT"));
    let file = builder().open(server.url("/f")).unwrap();
    assert_eq!(file.last_modified(), Some("Mon, 01 Jan 2024 00:00:00 GMT"));
    server.set_last_modified(Some("Tue, 02 Jan 2024 00:00:00 GMT"));
    let mut buf = [0u8; 10];
    let e = file.read_exact_at(MIB, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RemoteChanged, "{e}");

    server.set_last_modified(None);
    let file = builder().open(server.url("/f")).unwrap();
    server.set_data(test_data(4 * MIB as usize, 19));
    let e = file.read_exact_at(MIB, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RemoteChanged, "{e}");
    // A file that shrank below the range answers 416 with its new size.
    server.set_data(test_data(MIB as usize, 19));
    let e = file.read_exact_at(2 * MIB, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RemoteChanged, "{e}");
}

#[test]
fn a_connection_refused_on_this_machine_is_a_network_error_at_once() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let e = builder()
        .retry_policy(quick_retries(2))
        .open(format!("http://127.0.0.1:{port}/f"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Network, "{e}");
    // Nothing listens there: waiting would not change it.
    assert_eq!(e.attempts(), 1, "{e}");
    assert!(
        !e.is_retryable() && e.to_string().contains("nothing listens"),
        "{e}"
    );
    assert_eq!(e.io_kind(), std::io::ErrorKind::ConnectionRefused);
    // The system's error, with its code, for a chain of causes.
    let system = std::error::Error::source(&e)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .expect("the system's error as the source");
    assert_eq!(system.kind(), std::io::ErrorKind::ConnectionRefused);
    assert!(system.raw_os_error().is_some(), "{system:?}");
}

#[test]
fn a_failed_fetch_reaches_every_waiting_reader() {
    let data = test_data(3 * MIB as usize, 20);
    let server = RangeServer::new(data);
    let file = builder()
        .retry_policy(RetryPolicy::never())
        .open(server.url("/f"))
        .unwrap();
    let counted = file.clone();
    let misses = file.stats().cache_misses;
    server.set_hook(move |_, _| {
        // Answered once every reader has missed the cache, and so found
        // the fetch in flight (a watchdog, not an order, past 20 s).
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while counted.stats().cache_misses < misses + 4 && std::time::Instant::now() < until {
            std::thread::yield_now();
        }
        Reply::new(500)
    });
    let errors: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let file = file.clone();
                s.spawn(move || {
                    let mut buf = [0u8; 10];
                    file.read_exact_at(2 * MIB, &mut buf).unwrap_err()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for e in &errors {
        assert_eq!(e.kind(), ErrorKind::HttpStatus(500), "{e}");
    }
    assert_eq!(server.requests(), 2, "the waiters shared one fetch");
}

#[test]
fn a_dns_failure_is_a_network_error() {
    // `.invalid` never resolves (RFC 6761).
    let e = builder()
        .retry_policy(quick_retries(1))
        .open("http://no-such-host.invalid/f")
        .unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Network | ErrorKind::Timeout),
        "{e}"
    );
    assert_eq!(e.attempts(), 2);
}

#[test]
fn a_connect_that_never_completes_times_out() {
    let Some((listener, _held)) = remfile_testkit::full_listener() else {
        eprintln!("the backlog never filled here: a connect timeout cannot be provoked; skipping");
        return;
    };
    let addr = listener.local_addr().unwrap();
    let e = builder()
        .connect_timeout(Duration::from_millis(200))
        .retry_policy(quick_retries(1))
        .open(format!("http://{addr}/f"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert_eq!(e.attempts(), 2);
}

#[test]
fn extra_bytes_after_the_body_never_reach_a_read() {
    let data = Arc::new(test_data(3 * MIB as usize, 21));
    let d = data.clone();
    let server = RawServer::new(move |req, out| {
        let (first, last) = req.range().unwrap();
        let mut bytes = raw_206(&d, first, last);
        if req.n == 2 {
            // Ten bytes more than Content-Length says.
            bytes.extend_from_slice(b"GARBAGE!!!");
        }
        let _ = out.write_all(&bytes);
        After::KeepAlive
    });
    let file = builder().open(server.url("/f")).unwrap();
    let mut buf = vec![0; 1000];
    file.read_exact_at(MIB, &mut buf).unwrap();
    assert_eq!(buf, data[MIB as usize..][..1000]);
    file.read_exact_at(2 * MIB, &mut buf).unwrap();
    assert_eq!(buf, data[2 * MIB as usize..][..1000]);
}

#[test]
fn a_416_for_a_range_inside_the_file_is_malformed() {
    let data = test_data(3 * MIB as usize, 22);
    let server = RangeServer::new(data.clone());
    let file = builder().open(server.url("/f")).unwrap();
    let size = data.len();
    server.set_hook(move |_, _| Reply::new(416).header("Content-Range", format!("bytes */{size}")));
    let e = file.read_exact_at(MIB, &mut [0u8; 10]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MalformedResponse, "{e}");
    assert_eq!(e.attempts(), 1);
}

#[test]
fn every_5xx_is_retried_then_reported() {
    for status in [500, 502, 503, 504] {
        let data = test_data(1000, 23);
        // Transient: two failures, then the answer.
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let server = RangeServer::new(data.clone()).with_hook(move |_, r| {
            if c.fetch_add(1, Ordering::SeqCst) < 2 {
                Reply::new(status)
            } else {
                r
            }
        });
        let file = builder()
            .retry_policy(quick_retries(3))
            .open(server.url("/f"))
            .unwrap();
        assert_eq!(file.len(), 1000, "{status}");
        assert_eq!(server.requests(), 3, "{status}");
        // Persistent: the policy's attempts, then the status.
        server.set_hook(move |_, _| Reply::new(status));
        let e = builder()
            .retry_policy(quick_retries(3))
            .open(server.url("/f"))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::HttpStatus(status));
        assert_eq!(e.attempts(), 4, "{status}");
    }
}

#[test]
fn very_large_response_headers_are_refused() {
    let server = RawServer::new(|_, out| {
        let huge = "x".repeat(200 * 1024);
        let _ = write!(
            out,
            "HTTP/1.1 206 Partial Content\r\nX-Huge: {huge}\r\nContent-Length: 0\r\n\r\n"
        );
        After::Close
    });
    let e = builder()
        .retry_policy(quick_retries(2))
        .open(server.url("/f"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MalformedResponse, "{e}");
    assert_eq!(e.attempts(), 1, "not retried");
}

/// Writes a chunked body that never ends (until the client hangs up).
fn endless_chunked(out: &mut std::net::TcpStream, head: &str) {
    if out.write_all(head.as_bytes()).is_err() {
        return;
    }
    let chunk = vec![b'z'; 64 * 1024];
    for _ in 0..100_000 {
        let ok = write!(out, "{:x}\r\n", chunk.len()).is_ok()
            && out.write_all(&chunk).is_ok()
            && out.write_all(b"\r\n").is_ok();
        if !ok {
            return;
        }
    }
}

#[test]
fn an_endless_body_cannot_grow_memory_past_the_range() {
    // A 206 without Content-Length whose chunked body never ends.
    let server = RawServer::new(|req, out| {
        let (first, last) = req.range().unwrap();
        let head = format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {first}-{last}/1000000000000\r\n\
             Transfer-Encoding: chunked\r\n\r\n"
        );
        endless_chunked(out, &head);
        After::Close
    });
    let e = builder()
        .block_size(4096)
        .open(server.url("/f"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MalformedResponse, "{e}");
    assert!(e.to_string().contains("longer"), "{e}");
    assert_eq!(e.attempts(), 1);
}

#[test]
fn an_endless_error_body_is_cut_short() {
    let server = RawServer::new(|_, out| {
        endless_chunked(
            out,
            "HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n",
        );
        After::Close
    });
    let e = builder()
        .retry_policy(quick_retries(1))
        .open(server.url("/f"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::HttpStatus(500));
    assert_eq!(e.body_excerpt().map(str::len), Some(512));
}

#[test]
fn a_lying_content_length_on_200_is_refused_unread() {
    // Announces a terabyte: refused from the headers alone.
    let server = RawServer::new(|_, out| {
        let _ = out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\nabc");
        After::Close
    });
    let e = builder().open(server.url("/f")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RangeNotSupported, "{e}");
}

#[test]
fn a_read_past_the_cache_resumes_a_body_cut_short() {
    let data = Arc::new(test_data(8 * MIB as usize, 6));
    let server = cutting_the_second_body_short(&data);
    // Reads of 1 MiB or more go straight to the caller's buffer.
    let file = builder()
        .cache_bypass(MIB)
        .max_concurrent_requests(1)
        .open(server.url("/f"))
        .unwrap();
    let mut buf = vec![0; 3 * MIB as usize];
    file.read_exact_at(2 * MIB + 7, &mut buf).unwrap();
    assert!(buf == data[(2 * MIB + 7) as usize..][..buf.len()]);
    let s = file.stats();
    assert_eq!((s.requests, s.retries), (3, 1));
    assert_eq!(
        s.bytes_fetched,
        MIB + 3 * MIB,
        "only the missing bytes again"
    );
}

/// Lengths a file or a server names are bounded before they cost memory: a
/// server that calls a small file 2^50 bytes long, and ranges of any length
/// asked of it, cost at most the cache's budget.
mod hostile {
    use std::sync::atomic::Ordering;

    use remfile_testkit::{SPARSE_SIZE, builder, sparse_server};

    #[test]
    fn ranges_of_any_length_cost_at_most_the_cache() {
        let (server, sent) = sparse_server(b"sparse".to_vec());
        let capacity = 4 << 20;
        let file = builder()
            .block_size(4096)
            .cache_capacity(capacity)
            .open_tail(0)
            .open(server.url("/huge.bin"))
            .unwrap();
        assert_eq!(file.len(), SPARSE_SIZE);
        // 2^38 blocks each: listing them would take 2 TiB.
        let started = file.prefetch_in_background([0..SPARSE_SIZE, 0..u64::MAX], u64::MAX);
        assert!(started <= capacity, "{started}");
        file.prefetch(std::iter::once(0..SPARSE_SIZE)).unwrap();
        let mut end = [1u8; 16];
        file.read_exact_at(SPARSE_SIZE - 16, &mut end).unwrap();
        assert_eq!(end, [0; 16]);
        let mut head = [0u8; 6];
        file.read_exact_at(0, &mut head).unwrap();
        assert_eq!(&head, b"sparse");
        // The open, the guess, the prefetch and the read of the end: within
        // three cache budgets.
        let bytes = sent.load(Ordering::SeqCst);
        assert!(bytes <= 3 * capacity, "{bytes} bytes fetched");
    }
}
