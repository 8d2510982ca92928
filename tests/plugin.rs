//! The HDF5 driver as a plugin (`hdf5-plugin/`), loaded by the h5py wheel's
//! own HDF5 2.x from `HDF5_PLUGIN_PATH` with `HDF5_DRIVER=remfile`: h5py and
//! pynwb read remote files through it exactly like local ones.
//!
//! Needs a Python with h5py and pynwb from PyPI (`bash .ci/run` makes one in
//! `target/plugin-venv`): the tests that use it are ignored by `cargo test`
//! alone, and `-- --ignored` runs them.
#![cfg(feature = "hdf5")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use remfile::hdf5 as h5;
use remfile_testkit::{RangeServer, Reply, h5files, plugin_build, s3};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A Python with h5py and pynwb (the test fails, saying how to make one,
/// if there is none).
fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| remfile_testkit::python::with_modules(&["h5py", "pynwb"]))
}

/// A directory holding the plugin alone, built once.
fn plugin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| plugin_build::plugin_dir(false).expect("building the plugin"))
}

/// Runs the check script in `mode` through the plugin; its JSON line (and,
/// after it, what the plugin printed to standard error, if anything).
fn check(python: &Path, config: &str, args: &[&str]) -> String {
    let out = Command::new(python)
        .arg(root().join("tests/support/plugin_check.py"))
        .args(args)
        .env("HDF5_PLUGIN_PATH", plugin_dir())
        .env("HDF5_DRIVER", "remfile")
        .env("HDF5_DRIVER_CONFIG", config)
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("all_proxy")
        .env_remove("ALL_PROXY")
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stdout}\n{stderr}");
    let stats: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("remfile: "))
        .collect();
    format!("{}\n{}", stdout.trim(), stats.join("\n"))
}

/// The tests' NWB-like file with metadata over many blocks.
fn nwb_file() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let p = h5files::temp_path!("plugin-spread.nwb");
        let shape = h5files::NwbShape {
            rows: 60_000,
            chunk_rows: 128,
            deflate: Some(4),
            extra_groups: 60,
            format: h5files::Format::Earliest,
        };
        h5files::write_nwb(&p, shape).expect("write the test file");
        p
    })
}

#[test]
#[ignore = "needs target/plugin-venv (h5py, pynwb): bash .ci/run makes it; then cargo test --features hdf5 --test plugin -- --ignored"]
fn h5py_walks_a_remote_file_like_the_local_one() {
    let python = python();
    let server = RangeServer::new(std::fs::read(nwb_file()).unwrap());
    let url = server.url("/f.nwb");
    let local = nwb_file().to_str().unwrap();
    // No guesses in either, so that the counts are the walks' own (a guess
    // joined or not depends on timing).
    let quiet = "metadata_prefetch=off;chunk_read_ahead=off";
    let out = check(python, quiet, &["walk", &url, local]);
    assert!(out.contains(r#""same": true"#), "{out}");
    assert!(out.contains(r#""same_data": true"#), "{out}");
    let plugin_requests = server.requests();
    assert!(plugin_requests > 0, "read through the plugin");

    // The same walk through the Rust adapter, on the same kind of server.
    let server = RangeServer::new(std::fs::read(nwb_file()).unwrap());
    let file = h5::OpenOptions::new()
        .metadata_prefetch(false)
        .chunk_read_ahead(false)
        .remote(h5::builder().proxy_from_env(false))
        .open_url(server.url("/f.nwb"))
        .unwrap();
    h5files::walk_metadata(&file).unwrap();
    let ds = file.dataset("acquisition/ElectricalSeries/data").unwrap();
    ds.read_slice_2d::<i16, _>((1000..9000, ..)).unwrap();
    drop((ds, file));
    let adapter_requests = server.requests();
    eprintln!("requests: plugin {plugin_requests}, adapter {adapter_requests}");
    // The same driver, fetching what each walk reads: 15 and 10 here. h5py's
    // walk reads more — each dataset's storage information, so every leaf
    // of its chunk index — and HDF5 2.0 lays its reads out differently.
    assert!(
        plugin_requests <= 2 * adapter_requests,
        "plugin {plugin_requests}, adapter {adapter_requests}"
    );
}

#[test]
#[ignore = "needs target/plugin-venv (h5py, pynwb) and s3s-fs: bash .ci/run makes them; then cargo test --features hdf5 --test plugin -- --ignored"]
fn h5py_and_the_rust_adapter_read_an_s3_object_with_signed_requests() {
    let python = python();
    let store = s3::S3Server::start();
    store.put("f.nwb", &std::fs::read(nwb_file()).unwrap());
    let url = format!("s3://{}/f.nwb", s3::BUCKET);
    let config = format!(
        "s3_endpoint={};s3_access_key_id={};s3_secret_access_key={};stats=on",
        store.endpoint(),
        s3::ACCESS_KEY,
        s3::SECRET_KEY
    );
    let out = check(
        python,
        &config,
        &["walk", &url, nwb_file().to_str().unwrap()],
    );
    assert!(out.contains(r#""same": true"#), "{out}");
    assert!(out.contains(r#""same_data": true"#), "{out}");
    assert!(!out.contains(s3::SECRET_KEY), "{out}");

    let keys = remfile::S3Options::new()
        .endpoint(store.endpoint())
        .credentials(s3::ACCESS_KEY, s3::SECRET_KEY, None);
    let file = h5::OpenOptions::new()
        .remote(h5::builder().proxy_from_env(false).s3(keys))
        .open_url(&url)
        .unwrap();
    h5files::walk_metadata(&file).unwrap();
    let ds = file.dataset("acquisition/ElectricalSeries/data").unwrap();
    let remote = ds.read_slice_2d::<i16, _>((1000..9000, 2..4)).unwrap();
    let local = h5::hdf5_metno::File::open(nwb_file()).unwrap();
    let want = local
        .dataset("acquisition/ElectricalSeries/data")
        .unwrap()
        .read_slice_2d::<i16, _>((1000..9000, 2..4))
        .unwrap();
    assert_eq!(remote, want);
}

/// Opens a URL through netCDF4's HDF5 with the driver set by name and the
/// given configuration, after starting h5py's HDF5 or not; prints whether
/// the open succeeded.
const SECOND_HDF5_SCRIPT: &str = r#"
import ctypes, glob, os, sys
url, config, h5py_first = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
if h5py_first:
    import h5py  # its HDF5 starts, and loads the plugin (HDF5_DRIVER)
import netCDF4
lib = glob.glob(os.path.join(os.path.dirname(netCDF4.__file__), "..", "netcdf4.libs", "libhdf5-*"))[0]
B = ctypes.CDLL(lib, mode=os.RTLD_LOCAL)
B.H5open()
B.H5Pcreate.restype = ctypes.c_int64
B.H5Pcreate.argtypes = [ctypes.c_int64]
B.H5Pset_driver_by_name.argtypes = [ctypes.c_int64, ctypes.c_char_p, ctypes.c_char_p]
B.H5Fopen.restype = ctypes.c_int64
B.H5Fopen.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_int64]
fapl = B.H5Pcreate(ctypes.c_int64.in_dll(B, "H5P_CLS_FILE_ACCESS_ID_g").value)
# A library that cannot have the driver fails here (its initialisation with
# HDF5_DRIVER set fails) or at the open.
if fapl < 0 or B.H5Pset_driver_by_name(fapl, b"remfile", config.encode()) < 0:
    print("REFUSED")
else:
    print("OPENED" if B.H5Fopen(url.encode(), 0, fapl) >= 0 else "REFUSED")
"#;

fn write_file(python: &std::path::Path, path: &std::path::Path) {
    let out = Command::new(python)
        .args([
            "-c",
            "import h5py, numpy, sys\n\
             with h5py.File(sys.argv[1], 'w') as f: f['x'] = numpy.arange(1000)",
        ])
        .arg(path)
        .env_remove("HDF5_DRIVER")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

fn second_hdf5_opens(python: &std::path::Path, url: &str, h5py_first: bool) -> (String, String) {
    let plugin = plugin_dir();
    let out = Command::new(python)
        .args(["-c", SECOND_HDF5_SCRIPT, url, "https_only=true"])
        .arg(if h5py_first { "1" } else { "0" })
        .env("HDF5_PLUGIN_PATH", plugin)
        .env("HDF5_DRIVER", "remfile")
        .env_remove("HDF5_DRIVER_CONFIG")
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    (stdout.trim().to_owned(), stderr)
}

#[test]
#[ignore = "needs target/plugin-venv (h5py, netCDF4): bash .ci/run makes it; then cargo test --features hdf5 --test plugin -- --ignored"]
/// The driver's callbacks call one HDF5: a second HDF5 in the process (both
/// loading the plugin through `HDF5_DRIVER=remfile`) is refused the driver,
/// not handed one that reads its settings from the first (`https_only`
/// was lost).
fn a_second_hdf5_gets_no_driver_bound_to_the_first() {
    let python = remfile_testkit::python::with_modules(&["h5py", "netCDF4"]);
    let dir = remfile_testkit::TempDir::new("plugin-two-hdf5");
    std::fs::create_dir_all(&*dir).unwrap();
    let path = dir.join("f.h5");
    write_file(&python, &path);
    let server = RangeServer::new(std::fs::read(&path).unwrap());
    let url = server.url("/f.h5");
    // netCDF4's HDF5 alone: the driver reads its settings and refuses http.
    assert_eq!(second_hdf5_opens(&python, &url, false).0, "REFUSED");
    // With h5py's HDF5 started first, the driver is h5py's: netCDF4's HDF5
    // is refused it (its open must not succeed with settings read from the
    // other library), and says why.
    let (opened, stderr) = second_hdf5_opens(&python, &url, true);
    assert_eq!(opened, "REFUSED");
    assert!(
        stderr.contains("bound to the first HDF5 library"),
        "{stderr}"
    );
}

/// Printed by the plugin with `stats=on` when a file closes: its round trips.
fn printed_round_trips(out: &str) -> u64 {
    out.split(" round trips")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no statistics: {out}"))
}

#[test]
#[ignore = "needs target/plugin-venv (h5py, pynwb): bash .ci/run makes it; then cargo test --features hdf5 --test plugin -- --ignored"]
fn h5py_walks_every_corpus_file_in_three_rounds() {
    let python = python();
    let dir = remfile_testkit::python::small_corpus!();
    for name in remfile_testkit::python::CORPUS {
        let path = dir.join(name);
        // A round trip far longer than parsing a wave, as on any real link.
        let server = RangeServer::new(std::fs::read(&path).unwrap()).with_hook(|_, reply| {
            remfile_testkit::time::late(std::time::Duration::from_millis(20));
            reply
        });
        let out = check(
            python,
            "stats=on",
            &[
                "corpus",
                &server.url(&format!("/{name}")),
                path.to_str().unwrap(),
            ],
        );
        eprintln!("{name}: {out}");
        assert!(out.contains(r#""same": true"#), "{name}: {out}");
        assert!(printed_round_trips(&out) <= 3, "{name}: {out}");
    }
}

#[test]
#[ignore = "needs target/plugin-venv (h5py, pynwb): bash .ci/run makes it; then cargo test --features hdf5 --test plugin -- --ignored"]
fn pynwb_reads_a_remote_nwb_file() {
    let python = python();
    // pynwb wants the `.nwb` extension.
    let path = h5files::temp_path!("plugin-pynwb").with_extension("nwb");
    let status = Command::new(python)
        .arg(root().join("benches/write_nwb.py"))
        .arg(&path)
        .args(["--rows", "50000"])
        .env_remove("HDF5_DRIVER")
        .status()
        .expect("run python");
    assert!(status.success(), "writing the NWB file with pynwb failed");
    let server = RangeServer::new(std::fs::read(&path).unwrap());
    let out = check(python, "stats=on", &["pynwb", &server.url("/s.nwb")]);
    assert!(out.contains(r#""identifier": "remfile-bench""#), "{out}");
    assert!(out.contains(r#""shape": [50000, 64]"#), "{out}");
    // `stats=on`: the file's statistics at close (a guess still under way
    // then is counted by the server only).
    let printed: u64 = out
        .split("requests in ")
        .next()
        .and_then(|head| head.rsplit(' ').nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no statistics: {out}"));
    assert!(printed >= 1 && printed <= server.requests() as u64, "{out}");
}

#[test]
#[ignore = "needs target/plugin-venv (h5py, pynwb): bash .ci/run makes it; then cargo test --features hdf5 --test plugin -- --ignored"]
fn a_missing_file_is_an_error_naming_the_status() {
    let python = python();
    let server = RangeServer::new(vec![0; 10]).with_hook(|_, _| Reply::new(404));
    let out = check(python, "", &["open", &server.url("/gone.nwb")]);
    assert!(out.contains("404"), "{out}");
}

#[test]
#[ignore = "needs target/plugin-venv (h5py, pynwb): bash .ci/run makes it; then cargo test --features hdf5 --test plugin -- --ignored"]
fn a_bad_configuration_is_an_error_naming_the_key() {
    let python = python();
    let server = RangeServer::new(std::fs::read(nwb_file()).unwrap());
    let out = check(
        python,
        "cache=1GiB;blocksize=1MiB",
        &["open", &server.url("/f.nwb")],
    );
    assert!(out.contains("blocksize"), "{out}");
    assert!(out.contains("unknown key"), "{out}");
    assert_eq!(server.requests(), 0, "nothing fetched");
}

/// `tests/support/plugin_open.c` built against the HDF5 of the Python's h5py
/// wheel (which ships a library but no headers).
fn c_program(python: &Path) -> PathBuf {
    let out = Command::new(python)
        .args([
            "-c",
            "import glob, os, h5py; d = os.path.join(os.path.dirname(h5py.__file__), '..', 'h5py.libs'); \
             print([p for p in glob.glob(os.path.join(d, 'libhdf5-*.so*'))][0])",
        ])
        .output()
        .expect("run python");
    assert!(out.status.success(), "find the wheel's libhdf5");
    let lib = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let exe = h5files::temp_path!("plugin-open");
    let status = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(root().join("tests/support/plugin_open.c"))
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.parent().unwrap().display()))
        .status()
        .expect("run cc");
    assert!(status.success(), "compiling the C program failed");
    exe
}

#[test]
#[ignore = "needs target/plugin-venv (h5py, pynwb): bash .ci/run makes it; then cargo test --features hdf5 --test plugin -- --ignored"]
fn a_c_program_opens_a_remote_file_with_h5pset_driver_by_name() {
    let python = python();
    let exe = c_program(python);
    let server = RangeServer::new(std::fs::read(nwb_file()).unwrap());
    let run = |config: &str| {
        let out = Command::new(&exe)
            .args([&server.url("/f.nwb"), config])
            .env("HDF5_PLUGIN_PATH", plugin_dir())
            .env_remove("HDF5_DRIVER")
            .env_remove("http_proxy")
            .env_remove("HTTP_PROXY")
            .env_remove("all_proxy")
            .env_remove("ALL_PROXY")
            .output()
            .expect("run the C program");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{:?}: {stderr}", out.status);
        (
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            stderr,
        )
    };
    // The root group's links, through the Rust adapter (opening the local
    // file here could meet another test's h5py holding HDF5's file lock).
    let reference = RangeServer::new(std::fs::read(nwb_file()).unwrap());
    let links = h5::OpenOptions::new()
        .remote(h5::builder().proxy_from_env(false))
        .open_url(reference.url("/f.nwb"))
        .unwrap()
        .member_names()
        .unwrap()
        .len();
    let (out, err) = run("cache=64MiB");
    assert_eq!(out, format!("links {links}"), "{err}");
    let (out, err) = run("cache=64MiB;block=1MiB");
    assert_eq!(out, "failed");
    assert!(err.contains("`block`: unknown key"), "{err}");
}

#[test]
#[ignore = "needs target/plugin-venv (h5py, pynwb): bash .ci/run makes it; then cargo test --features hdf5 --test plugin -- --ignored"]
fn a_second_run_reads_from_the_disk_cache() {
    let python = python();
    let server = RangeServer::new(std::fs::read(nwb_file()).unwrap());
    let dir = h5files::temp_path!("plugin-disk-dir");
    // No guesses: a guess still in flight when a run ends is not on disk
    // for the next (which would then guess it again).
    let config = format!(
        "disk_cache={};stats=on;metadata_prefetch=off;chunk_read_ahead=off",
        dir.display()
    );
    let url = server.url("/f.nwb?signature=1");
    let local = nwb_file().to_str().unwrap();
    let first = check(python, &config, &["walk", &url, local]);
    assert!(first.contains(r#""same": true"#), "{first}");
    let cold = server.requests();
    // Another run, another signature: one request, answered 304.
    let url = server.url("/f.nwb?signature=2");
    let second = check(python, &config, &["walk", &url, local]);
    assert!(second.contains(r#""same": true"#), "{second}");
    assert_eq!(server.requests(), cold + 1, "{second}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// HDF5 closes its plugins at exit while the driver's background threads
/// may still run the library's code: the plugin stays loaded once loaded
/// (`-z nodelete`), so that an exiting program never has it unmapped under
/// them.
#[cfg(target_os = "linux")]
#[test]
fn the_plugin_stays_loaded_once_loaded() {
    use std::ffi::CString;
    let path = CString::new(
        plugin_dir()
            .join("libremfile_hdf5.so")
            .to_str()
            .unwrap()
            .to_owned(),
    )
    .unwrap();
    // SAFETY: the plugin library, loaded and closed as HDF5 does; nothing
    // of it is called.
    unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!handle.is_null(), "the plugin loads");
        assert_eq!(libc::dlclose(handle), 0);
        let again = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(!again.is_null(), "closed, the plugin was unloaded");
        libc::dlclose(again);
    }
}
