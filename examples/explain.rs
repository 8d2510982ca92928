//! Opens and walks a remote HDF5/NWB file (every group, dataset and
//! attribute, as `h5ls` and users do), then prints what it took round trip
//! by round trip: the requests, their bytes, which of HDF5's structures
//! each round brought, and what the file's author could change.
//!
//! ```text
//! cargo run --features hdf5 --example explain -- URL
//! cargo run --features hdf5 --example explain          # a generated NWB-like demo file
//! ```
//!
//! Without a URL, an NWB-like file is generated and served from a range
//! server on 127.0.0.1 that answers 30 ms late, so it runs with no network.

use std::time::Duration;

use remfile::hdf5::{self as h5, hdf5_metno::Group};
use remfile_testkit::h5files;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = match std::env::args().nth(1) {
        Some(url) => (url, None),
        None => {
            let path = h5files::temp_path!("explain-demo.nwb");
            h5files::write_nwb_like(&path)?;
            let server =
                remfile_testkit::RangeServer::new(std::fs::read(&path)?).with_hook(|_, reply| {
                    // A server 30 ms away.
                    remfile_testkit::time::late(Duration::from_millis(30));
                    reply
                });
            let _ = std::fs::remove_file(&path);
            (server.url("/demo.nwb"), Some(server))
        }
    };
    let file = h5::OpenOptions::new()
        .trace(true)
        .remote(h5::builder().proxy_from_env(false))
        .open_url(&url)?;
    walk(&file)?;
    let explanation = h5::explain_file(&file).expect("opened with trace");
    println!("{url}");
    print!("{explanation}");
    Ok(())
}

/// Every attribute, group and dataset's header, as a walk reads them.
fn walk(group: &Group) -> remfile::hdf5::hdf5_metno::Result<()> {
    for name in group.attr_names()? {
        let _ = group.attr(&name)?.dtype();
    }
    for name in group.member_names()? {
        if let Ok(sub) = group.group(&name) {
            walk(&sub)?;
        } else if let Ok(ds) = group.dataset(&name) {
            let _ = (ds.shape(), ds.dtype()?, ds.chunk());
            for attr in ds.attr_names()? {
                let _ = ds.attr(&attr)?.dtype();
            }
        }
    }
    Ok(())
}
