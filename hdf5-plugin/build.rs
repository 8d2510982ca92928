//! Marks the plugin as never unloaded (`-z nodelete`). HDF5 closes its
//! plugins at exit (`H5PL_term_package` → `dlclose`) while the driver's
//! background threads — the metadata crawl, fetches, name resolution — may
//! still run the library's code or be starting: unmapped under them, they
//! crash the process as it exits. Kept loaded, they end with the process.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let elf = !matches!(os.as_str(), "macos" | "ios" | "windows");
    if elf {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    }
}
