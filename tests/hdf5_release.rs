//! The remote file is released when the last HDF5 object using it is dropped.
//! (Its own test binary: the count it checks is per process.)
#![cfg(feature = "hdf5")]

use remfile::hdf5 as h5;
use remfile_testkit::h5files;

#[test]
fn the_remote_file_lives_as_long_as_the_last_hdf5_object() {
    let path = h5files::temp_path!("release.h5");
    h5files::write_rich(&path).unwrap();
    let server = remfile_testkit::RangeServer::new(std::fs::read(&path).unwrap());
    assert_eq!(h5::open_remote_files(), 0);

    let file = h5::open_url(server.url("/f.h5")).unwrap();
    assert_eq!(h5::open_remote_files(), 1);
    let ds = file.dataset("contiguous").unwrap();
    let group = file.group("a/level0").unwrap();
    drop(file);
    assert_eq!(h5::open_remote_files(), 1, "objects keep the file open");
    let values: Vec<f64> = ds.read_raw().unwrap();
    assert_eq!(values.len(), 200_000);
    drop(ds);
    assert_eq!(h5::open_remote_files(), 1);
    drop(group);
    assert_eq!(h5::open_remote_files(), 0, "released with the last object");

    // A failed open leaks nothing either.
    let bad = remfile_testkit::RangeServer::new(vec![0u8; 5000]);
    assert!(h5::open_url(bad.url("/x")).is_err());
    assert_eq!(h5::open_remote_files(), 0);
    let _ = std::fs::remove_file(path);
}
