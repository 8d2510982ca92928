//! The report `cargo test` closes its integration tests with: which test
//! binaries this build left out (a feature off) and which tests it ignored
//! (a tool missing from a bare machine), each with the command that runs
//! them. It fails if an ignored test's reason does not name the command
//! that runs its own binary.

use std::path::Path;

/// The features a test binary is built with, as `#![cfg(...)]` names them,
/// and whether this build has each.
const FEATURES: [(&str, bool); 3] = [
    ("hdf5", cfg!(feature = "hdf5")),
    ("fuzzing", cfg!(feature = "fuzzing")),
    ("s3", cfg!(feature = "s3")),
];

/// How a feature's tests are run.
fn how_to_build(feature: &str) -> &'static str {
    match feature {
        "hdf5" => {
            "it links the system libhdf5 (apt-get install libhdf5-dev pkg-config): cargo test --features hdf5"
        }
        "fuzzing" => "cargo test --features hdf5,fuzzing --test fuzz_corpus",
        _ => "a default feature: cargo test",
    }
}

fn main() {
    // Asked for its tests (`--list`, as runners do): it has none.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut files: Vec<_> = std::fs::read_dir(&tests)
        .expect("the tests directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    let mut left_out = Vec::new();
    let mut ignored = Vec::new();
    let mut wrong = Vec::new();
    for path in &files {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).expect("a test file");
        // The first feature off that the file's `#![cfg(...)]` asks for.
        let off = FEATURES.iter().find(|(feature, on)| {
            !on && text.lines().any(|l| {
                l.starts_with("#![cfg(") && l.contains(&format!("feature = \"{feature}\""))
            })
        });
        if let Some((feature, _)) = off {
            left_out.push((name, *feature));
            continue;
        }
        let reasons: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("#[ignore = \"needs "))
            .filter_map(|l| l.strip_suffix("\"]"))
            .collect();
        for reason in &reasons {
            if !reason.contains(&format!("--test {name} -- --ignored")) {
                wrong.push(format!("tests/{name}.rs: `needs {reason}`"));
            }
        }
        if let Some(first) = reasons.first() {
            ignored.push((name, reasons.len(), first.to_string()));
        }
    }
    println!();
    println!(
        "What this `cargo test` did not run (`bash .ci/run` installs what they need and runs them all):"
    );
    for (feature, _) in FEATURES {
        let names: Vec<String> = left_out
            .iter()
            .filter(|(_, f)| *f == feature)
            .map(|(name, _)| format!("tests/{name}.rs"))
            .collect();
        if !names.is_empty() {
            println!(
                "  not built without feature `{feature}`: {}",
                names.join(", ")
            );
            println!("      {}", how_to_build(feature));
        }
    }
    for (name, count, reason) in &ignored {
        println!("  tests/{name}.rs: {count} ignored, needs {reason}");
    }
    if left_out.is_empty() && ignored.is_empty() {
        println!("  nothing");
    }
    println!();
    assert!(
        wrong.is_empty(),
        "ignored tests whose reason does not name the command that runs them: {wrong:#?}"
    );
}
