//! Fetch sizes that follow the link: a known link fixes them, a measured one
//! is learned from the responses.

use std::time::Duration;

use remfile::Link;
use std::io::Write;

use remfile_testkit::{After, RangeServer, RawServer, builder, range_reply, test_data};

const MIB: u64 = 1024 * 1024;
const MS: Duration = Duration::from_millis(1);

#[test]
fn a_slow_link_spreads_a_fetch_over_more_connections() {
    let data = test_data(16 * MIB as usize, 1);
    let server = RangeServer::new(data.clone());
    let mut buf = vec![0u8; 4 * MIB as usize];
    // 30 ms at 25 MB/s: 750 kB in flight per round trip, so one-block parts
    // keep four connections busy; with the link ignored, 4 MiB is one part.
    for (link, parts) in [(Link::known(30 * MS, 25_000_000), 4), (Link::Ignored, 1)] {
        let file = builder().link(link).open(server.url("/f")).unwrap();
        let before = file.stats();
        file.read_exact_at(8 * MIB, &mut buf).unwrap();
        assert!(buf == data[8 * MIB as usize..12 * MIB as usize]);
        let d = file.stats().since(&before);
        assert_eq!((d.requests, d.round_trips), (parts, 1), "{link:?}");
    }
}

#[test]
fn a_sequential_stream_reads_ahead_a_bandwidth_delay_product() {
    let data = test_data(40 * MIB as usize, 2);
    let server = RangeServer::new(data.clone());
    // 30 ms at 500 MB/s: 15 MB in flight per round trip.
    let file = builder()
        .link(Link::known(30 * MS, 500_000_000))
        .open(server.url("/f"))
        .unwrap();
    assert_eq!(
        file.link_estimate().unwrap().bandwidth_delay_product(),
        15_000_000
    );
    let mut buf = vec![0u8; 64 * 1024];
    file.read_exact_at(MIB, &mut buf).unwrap(); // starts a stream: no read-ahead
    let before = file.stats();
    let mut pos = MIB + buf.len() as u64;
    while pos < 2 * MIB + buf.len() as u64 {
        file.read_exact_at(pos, &mut buf).unwrap();
        assert!(buf == data[pos as usize..][..buf.len()]);
        pos += buf.len() as u64;
    }
    let d = file.stats().since(&before);
    // The first sequential miss (at 2 MiB) fetched 15 MB beyond the read:
    // blocks 2 to 16, in parts of at least split_size (4 MiB), in one round.
    assert_eq!(d.bytes_fetched, 15 * MIB, "{d:?}");
    assert_eq!((d.requests, d.round_trips), (3, 1), "{d:?}");
}

#[test]
fn random_reads_are_never_enlarged_by_the_link() {
    let data = test_data(64 * MIB as usize, 3);
    let server = RangeServer::new(data);
    let file = builder()
        .link(Link::known(100 * MS, 1_000_000_000))
        .open(server.url("/f"))
        .unwrap();
    let before = file.stats();
    let mut buf = [0u8; 4096];
    for pos in [50 * MIB, 10 * MIB + 5, 33 * MIB, 2 * MIB + 77] {
        file.read_exact_at(pos, &mut buf).unwrap();
    }
    let d = file.stats().since(&before);
    assert_eq!((d.requests, d.bytes_fetched), (4, 4 * MIB));
}

#[test]
fn the_link_is_measured_from_the_responses() {
    let data = test_data(8 * MIB as usize, 4);
    // 20 ms before the headers, then the body at about 32 MB/s.
    let server = RawServer::new(move |req, stream| {
        remfile_testkit::time::late(20 * MS);
        let reply = range_reply(&data, Some("\"v1\""), None, req).to_bytes();
        let body_at = reply.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        stream.write_all(&reply[..body_at]).unwrap();
        for piece in reply[body_at..].chunks(64 * 1024) {
            remfile_testkit::time::late(2 * MS);
            stream.write_all(piece).unwrap();
        }
        After::KeepAlive
    });
    let file = builder()
        .link(Link::Measured)
        .open(server.url("/f"))
        .unwrap();
    // The opening request gave a wait and a 1 MiB body.
    let link = file.link_estimate().expect("measured at open");
    assert!(link.round_trip >= 20 * MS, "{link:?}");
    // Bounds the server's pacing sets, whatever the machine's load: the
    // body's pieces come at least 2 ms apart (at most 35 MB/s from its
    // first byte), the wait before it is not counted as transfer.
    assert!((1..40_000_000).contains(&link.bytes_per_second), "{link:?}");
    let ignored = builder().open(server.url("/f")).unwrap();
    assert_eq!(ignored.link_estimate(), None);
}

#[test]
fn a_body_buffered_before_it_was_read_is_no_measure() {
    let data = test_data(4 * MIB as usize, 5);
    // The whole answer comes at once, 40 ms late: on loopback the body is
    // in the socket's buffer before the headers are parsed.
    let server = RangeServer::new(data).with_hook(|_, reply| {
        remfile_testkit::time::late(40 * MS);
        reply
    });
    let file = builder()
        .link(Link::Measured)
        .open(server.url("/f"))
        .unwrap();
    assert_eq!(file.link_estimate(), None, "no throughput sample yet");
}
