//! Lists the tree of a remote HDF5/NWB file: groups, datasets with shape and
//! type, attribute names, and at the end what it cost.
//!
//! ```text
//! cargo run --features hdf5 --example h5ls -- URL
//! cargo run --features hdf5 --example h5ls          # a generated NWB-like demo file
//! ```
//!
//! Without a URL, an NWB-like file is generated and served from a range server
//! on 127.0.0.1, so it runs with no network.

use remfile::RemoteFile;
use remfile::hdf5::{
    self as h5,
    hdf5_metno::{self as h5lib, Group},
};
use remfile_testkit::h5files;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = match std::env::args().nth(1) {
        Some(url) => (url, None),
        None => {
            let path = h5files::temp_path!("h5ls-demo.nwb");
            h5files::write_nwb_like(&path)?;
            let server = remfile_testkit::RangeServer::new(std::fs::read(&path)?);
            let _ = std::fs::remove_file(&path);
            (server.url("/demo.nwb"), Some(server))
        }
    };
    // As `hdf5::open_url` does (the superblock and the file's tail at once),
    // without a proxy from the environment for the local demo server.
    let file = h5::OpenOptions::new()
        .remote(
            RemoteFile::builder()
                .proxy_from_env(false)
                .open_tail(h5::OPEN_TAIL),
        )
        .open_url(&url)?;
    let info = h5::driver_info(&file).expect("opened by remfile");
    println!("{} ({} bytes)", info.remote.url(), info.remote.len());
    list(&file, 0)?;
    let info = h5::driver_info(&file).expect("opened by remfile");
    let (s, p) = (info.remote.stats(), info.prefetch);
    println!(
        "requests: {}, round trips: {}, bytes fetched: {}, HDF5 read callbacks: {}",
        s.requests, s.round_trips, s.bytes_fetched, info.read_calls
    );
    println!(
        "metadata reads foreseen by the prefetch: {} of {}",
        p.predicted_reads,
        p.predicted_reads + p.unpredicted_reads
    );
    Ok(())
}

fn list(group: &Group, depth: usize) -> h5lib::Result<()> {
    let pad = "  ".repeat(depth);
    for name in group.attr_names()? {
        println!("{pad}@{name}");
    }
    let mut names = group.member_names()?;
    names.sort();
    for name in names {
        if let Ok(sub) = group.group(&name) {
            println!("{pad}{name}/");
            list(&sub, depth + 1)?;
        } else if let Ok(ds) = group.dataset(&name) {
            let dtype = ds
                .dtype()
                .and_then(|t| t.to_descriptor())
                .map(|d| d.to_string())
                .unwrap_or_else(|_| "?".into());
            println!("{pad}{name}  {:?} {dtype}", ds.shape());
            for attr in ds.attr_names()? {
                println!("{pad}  @{attr}");
            }
        } else {
            println!("{pad}{name}  (other object)");
        }
    }
    Ok(())
}
