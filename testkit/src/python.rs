//! The Python the tests run writers and readers with: `REMFILE_PLUGIN_PYTHON`,
//! else the virtual environment `bash .ci/run` makes in `target/plugin-venv`.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// A Python that imports every one of `modules`; the test fails, saying how
/// to make one, if there is none.
pub fn with_modules(modules: &[&str]) -> PathBuf {
    let root = crate::package_root();
    let candidates = [
        std::env::var_os("REMFILE_PLUGIN_PYTHON").map(PathBuf::from),
        Some(root.join("target/plugin-venv/bin/python")),
    ];
    let import = format!("import {}", modules.join(", "));
    let found = candidates.into_iter().flatten().find(|p| {
        Command::new(p)
            .args(["-c", &import])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    found.unwrap_or_else(|| {
        crate::skip::needed(&format!(
            "no Python with {} (target/plugin-venv)",
            modules.join(", ")
        ))
    })
}

#[doc(inline)]
pub use crate::small_corpus;

/// The corpus of `benches/corpus.py` in its small size (files of a few MB
/// from nine writers), written once under the tests' temporary directory
/// (the test fails, saying how to get one, where no Python can write it).
/// `small_corpus!()` is
/// [`small_corpus_in`]`(option_env!("CARGO_TARGET_TMPDIR"))`, the variable
/// read where the macro is expanded (cargo sets it when it builds
/// integration tests and benchmarks).
#[macro_export]
macro_rules! small_corpus {
    () => {
        $crate::python::small_corpus_in(::std::option_env!("CARGO_TARGET_TMPDIR"))
    };
}

/// The corpus of [`small_corpus!`], written once a process under `tmpdir`
/// (cargo's temporary directory for tests; `target/tmp` if not given): the
/// first call's directory is every later call's.
pub fn small_corpus_in(tmpdir: Option<&str>) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let python = with_modules(&["h5py", "pynwb", "netCDF4", "tables", "h5netcdf"]);
        let root = crate::package_root();
        let tmp = tmpdir.map_or_else(|| root.join("target/tmp"), PathBuf::from);
        let dir = tmp.join("corpus-small");
        let out = Command::new(python)
            .arg(root.join("benches/corpus.py"))
            .arg(&dir)
            .args(["--size", "small", "--only", &CORPUS.join(",")])
            .env_remove("HDF5_DRIVER")
            .output()
            .expect("run benches/corpus.py");
        assert!(
            out.status.success(),
            "benches/corpus.py failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
    .clone()
}

/// The files of [`small_corpus!`], by name.
pub const CORPUS: [&str; 9] = [
    "nwb_deep.nwb",
    "nwb_ophys.nwb",
    "nwb_icephys.nwb",
    "netcdf4.nc",
    "h5py_track_order_v110.h5",
    "h5py_latest.h5",
    "h5py_gzip.h5",
    "pytables.h5",
    "h5netcdf.nc",
];
