//! The HDF5 plugin (`hdf5-plugin/`), built by cargo and copied alone into a
//! directory of its own (HDF5 tries every file of a plugin directory): for
//! the plugin's tests (a debug build) and the cloud benchmark (release).

use std::path::PathBuf;
use std::process::Command;

/// Builds the plugin and returns the directory holding it alone, under the
/// target directory; why not, if it could not be built.
pub fn plugin_dir(release: bool) -> Result<PathBuf, String> {
    let root = crate::package_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut args = vec!["build", "--quiet", "-p", "remfile-hdf5-plugin"];
    if release {
        args.push("--release");
    }
    let status = Command::new(cargo)
        .current_dir(&root)
        .args(&args)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("cargo {} failed", args.join(" ")));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let profile = if release { "release" } else { "debug" };
    let dir = target.join(format!("hdf5-plugin-{profile}"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let so = "libremfile_hdf5.so";
    // Copied beside, then renamed over: a program of another test run that
    // loaded the old one keeps its (unlinked) file, never one rewritten
    // under it.
    let beside = crate::per_process(&dir, &format!("{so}."));
    std::fs::copy(target.join(profile).join(so), &beside)
        .and_then(|_| std::fs::rename(&beside, dir.join(so)))
        .map_err(|e| format!("copying the plugin: {e}"))?;
    Ok(dir)
}
