//! Reads a file over HTTP with `remfile` and prints what it cost.
//!
//! ```text
//! cargo run --example demo             # a generated file, served locally
//! cargo run --example demo -- URL      # any http(s) URL
//! ```
//!
//! Without a URL, a 48 MiB file is generated and served by a small range
//! server on 127.0.0.1 (no network needed); every byte read is checked
//! against the original.

use std::io::{Read, Seek, SeekFrom};

use remfile::{RemoteFile, Stats};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    match std::env::args().nth(1) {
        Some(url) => remote(&url),
        None => demo(),
    }
}

fn remote(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let file = RemoteFile::builder().open_tail(1 << 20).open(url)?;
    println!(
        "{}: {} bytes, ETag {:?}",
        file.url(),
        file.len(),
        file.etag()
    );
    let mut head = vec![0u8; file.len().min(64) as usize];
    file.read_exact_at(0, &mut head)?;
    println!("first bytes: {}", hex(&head));
    report("open (+ the last MiB) + first bytes", file.stats());
    if let Some(link) = file.link_estimate() {
        println!(
            "link: {:?} round trip, {} MB/s per connection",
            link.round_trip,
            link.bytes_per_second / 1_000_000
        );
    }
    Ok(())
}

fn demo() -> Result<(), Box<dyn std::error::Error>> {
    let data = remfile_testkit::test_data(48 << 20, 7);
    let server = remfile_testkit::RangeServer::new(data.clone());
    let url = server.url("/demo.bin");
    println!("serving a {} MiB file at {url}", data.len() >> 20);

    let mut file = RemoteFile::builder().proxy_from_env(false).open(&url)?;
    report("open", file.stats());

    // Scattered small reads, like the metadata of an HDF5 file.
    let before = file.stats();
    for pos in [0, 40 << 20, 1 << 20, 25 << 20, 40 << 20] {
        let mut buf = [0u8; 512];
        file.read_exact_at(pos, &mut buf)?;
        assert_eq!(buf[..], data[pos as usize..][..512]);
    }
    let scattered = file.stats().since(&before);
    report("5 scattered 512-byte reads", scattered);
    println!(
        "{:>38}(each miss fetches its whole block, {} KiB here (Builder::block_size): \
         {} blocks for 5 reads, as the first block came with the open and the last read \
         is the second's again)",
        "",
        file.block_size() >> 10,
        scattered.bytes_fetched / file.block_size(),
    );

    // The same kind of reads when their positions are known in advance: all
    // at once, in one round trip.
    let before = file.stats();
    let wanted = [
        3 << 20..(3 << 20) + 512,
        30 << 20..(30 << 20) + 512,
        45 << 20..(45 << 20) + 4096,
    ];
    for (range, bytes) in wanted.iter().zip(file.read_ranges(&wanted)?) {
        assert_eq!(bytes[..], data[range.start as usize..range.end as usize]);
    }
    report("3 ranges with read_ranges", file.stats().since(&before));

    // One large read: all its blocks in one round trip (in parallel parts).
    let before = file.stats();
    let mut big = vec![0u8; 23_000_000];
    file.read_exact_at(10 << 20, &mut big)?;
    assert!(big[..] == data[10 << 20..][..big.len()]);
    report("one 23 MB read", file.stats().since(&before));

    // A sequential scan through `Read`, in 64 KiB pieces: read-ahead grows.
    let before = file.stats();
    file.seek(SeekFrom::Start(0))?;
    let mut all = Vec::new();
    file.read_to_end(&mut all)?;
    assert!(all == data);
    report(
        "sequential scan of the whole file",
        file.stats().since(&before),
    );
    println!("all bytes match the original");
    Ok(())
}

fn report(what: &str, s: Stats) {
    println!(
        "{what:>36}: {:>3} requests, {:>3} round trips, {:>9} bytes fetched, {} cache hits",
        s.requests, s.round_trips, s.bytes_fetched, s.cache_hits
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
