//! Helpers for the integration tests: build and run the fixture apps as separate cargo
//! projects, and compute references with numpy in the toolchain's Python.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

/// The workspace root.
pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A fixture folder under `fixtures/`.
pub fn fixture(name: &str) -> PathBuf {
    workspace_root().join("fixtures").join(name)
}

/// The target dir all fixture builds share, so the crates they depend on build once.
pub fn fixture_target_dir() -> PathBuf {
    workspace_root().join("target").join("fixtures")
}

/// `cargo <args>` in `dir` with the shared fixture target dir and `env` added.
pub fn cargo(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()));
    command
        .current_dir(dir)
        .args(args)
        .env("CARGO_TARGET_DIR", fixture_target_dir())
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    for (name, value) in env {
        command.env(name, value);
    }
    command
        .output()
        .unwrap_or_else(|error| panic!("running cargo in {}: {error}", dir.display()))
}

/// Builds and runs a fixture app with `args`; panics with cargo's output on failure.
pub fn run_fixture(name: &str, args: &[&str]) -> String {
    let mut all = vec!["run", "--quiet", "--"];
    all.extend_from_slice(args);
    let output = cargo(&fixture(name), &all, &[]);
    assert_success(&output, &format!("cargo run of fixture {name}"));
    String::from_utf8(output.stdout).expect("utf-8 output")
}

/// Panics with stdout and stderr when `output` is a failure.
pub fn assert_success(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed ({})\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A Python with TVM and numpy: the one relax-build itself finds (or provisions).
pub fn toolchain_python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let cache = relax_build::Config::new().cache().expect("a cache folder");
        relax_build::toolchain::find_or_provision(None, &cache)
            .unwrap_or_else(|error| panic!("no TVM toolchain for the tests: {error}"))
            .python
    })
}

/// Runs a Python script with the toolchain's Python and returns its stdout.
pub fn python(script: &Path, args: &[&str]) -> String {
    let output = Command::new(toolchain_python())
        .arg(script)
        .args(args)
        .output()
        .expect("running python");
    assert_success(&output, &format!("python {}", script.display()));
    String::from_utf8(output.stdout).expect("utf-8 output")
}

/// Asserts that two `{"shape", "data"}` JSON tensors match within `tolerance` (absolute
/// and relative to the reference).
pub fn assert_tensors_close(what: &str, actual: &Value, expected: &Value, tolerance: f64) {
    assert_eq!(actual["shape"], expected["shape"], "{what}: shape");
    let actual = actual["data"].as_array().expect("data array");
    let expected = expected["data"].as_array().expect("data array");
    assert_eq!(actual.len(), expected.len(), "{what}: element count");
    assert!(!actual.is_empty(), "{what}: no elements to compare");
    for (index, (a, e)) in actual.iter().zip(expected).enumerate() {
        let (a, e) = (a.as_f64().unwrap(), e.as_f64().unwrap());
        assert!(
            (a - e).abs() <= tolerance * (1.0 + e.abs()),
            "{what}[{index}]: {a} vs reference {e} (tolerance {tolerance})"
        );
    }
}

/// Writes `value` as JSON into a new temporary file.
pub fn json_file(value: &Value) -> tempfile::NamedTempFile {
    let file = tempfile::Builder::new()
        .suffix(".json")
        .tempfile()
        .expect("temp file");
    std::fs::write(file.path(), value.to_string()).expect("writing JSON");
    file
}
