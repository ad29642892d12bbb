//! Cross-compiled releases: aarch64 builds from x86_64, bundled with their runtime and run
//! under qemu, offline from prepared artifacts, and a wrong-architecture library refused.

use std::path::Path;

use relax_cargo_tests::{
    assert_success, assert_tensors_close, cargo, cargo_relax, copy_fixture, fixture,
    fixture_target_dir, json_file, line_after, path_without_python, run_fixture, run_under_qemu,
    stdout, workspace_root, CROSS_LINKER, CROSS_TARGET,
};
use serde_json::{json, Value};

/// `cargo relax bundle` into a new folder; returns the bundled executable.
fn bundle(selection: &[&str], bin: &str, out: &Path) -> std::path::PathBuf {
    let mut args = vec![
        "bundle",
        "--release",
        "--target",
        CROSS_TARGET,
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(selection);
    let output = cargo_relax(&args, &[]);
    assert_success(&output, "cargo relax bundle");
    let dir = out.join(format!("{bin}-{CROSS_TARGET}"));
    for file in [bin, "libtvm_ffi.so", "libtvm_runtime.so", "README.md"] {
        assert!(dir.join(file).is_file(), "the bundle has {file}");
    }
    dir.join(bin)
}

#[test]
fn quickstart_for_aarch64_runs_under_qemu_like_the_native_build() {
    let build = cargo(
        workspace_root(),
        &[
            "build",
            "--quiet",
            "--release",
            "--target",
            CROSS_TARGET,
            "-p",
            "quickstart",
        ],
        &[],
    );
    assert_success(&build, "cross build of the quickstart");
    let temp = tempfile::tempdir().unwrap();
    let executable = bundle(&["-p", "quickstart"], "quickstart", temp.path());

    let emulated = run_under_qemu(&executable, &["--predictions"], temp.path());
    assert_success(&emulated, "the aarch64 quickstart under qemu");
    let native = cargo(
        workspace_root(),
        &[
            "run",
            "--quiet",
            "--release",
            "-p",
            "quickstart",
            "--",
            "--predictions",
        ],
        &[],
    );
    assert_success(&native, "the native quickstart");
    let (emulated, native) = (stdout(&emulated), stdout(&native));
    assert_eq!(
        line_after(&emulated, "accuracy: "),
        line_after(&native, "accuracy: ")
    );
    assert_eq!(
        line_after(&emulated, "predictions: "),
        line_after(&native, "predictions: ")
    );
}

/// The sentence-embeddings example (a real 6-layer encoder, its weights and tokenizer
/// fetched at build time) prints the same similarity matrix under qemu.
#[test]
fn sentence_embeddings_for_aarch64_print_the_native_matrix() {
    let sentences = [
        "The weather is lovely today.",
        "It's so sunny outside!",
        "He drove to the stadium.",
    ];
    let build = cargo(
        workspace_root(),
        &[
            "build",
            "--quiet",
            "--release",
            "--target",
            CROSS_TARGET,
            "-p",
            "sentence-embeddings",
        ],
        &[],
    );
    assert_success(&build, "cross build of sentence-embeddings");
    let temp = tempfile::tempdir().unwrap();
    let executable = bundle(
        &["-p", "sentence-embeddings"],
        "sentence-embeddings",
        temp.path(),
    );
    let emulated = run_under_qemu(&executable, &sentences, temp.path());
    assert_success(&emulated, "the aarch64 sentence-embeddings under qemu");
    let mut args = vec![
        "run",
        "--quiet",
        "--release",
        "-p",
        "sentence-embeddings",
        "--",
    ];
    args.extend(sentences);
    let native = cargo(workspace_root(), &args, &[]);
    assert_success(&native, "the native sentence-embeddings");
    let matrix = |output: &str| -> Vec<String> {
        output
            .lines()
            .skip_while(|line| !line.starts_with("cosine similarity:"))
            .take(5)
            .map(str::to_string)
            .collect()
    };
    let (emulated, native) = (stdout(&emulated), stdout(&native));
    assert_eq!(matrix(&emulated).len(), 5, "{emulated}");
    assert_eq!(
        matrix(&emulated),
        matrix(&native),
        "emulated:\n{emulated}\nnative:\n{native}"
    );
}

#[test]
fn nn_fixture_for_aarch64_matches_the_native_build_to_1e_5() {
    let manifest = fixture("nn-mlp").join("Cargo.toml");
    let build = cargo(
        &fixture("nn-mlp"),
        &["build", "--quiet", "--release", "--target", CROSS_TARGET],
        &[],
    );
    assert_success(&build, "cross build of the nn-mlp fixture");
    let temp = tempfile::tempdir().unwrap();
    let executable = bundle(
        &["--manifest-path", manifest.to_str().unwrap()],
        "fixture-nn-mlp",
        temp.path(),
    );

    let values: Vec<f32> = (0..6 * 8)
        .map(|index| ((index * 37) % 23) as f32 / 7.0 - 1.5)
        .collect();
    let inputs = json_file(&json!({"x": {"shape": [6, 8], "data": values}}));
    let path = inputs.path().to_str().unwrap();
    let emulated = run_under_qemu(&executable, &[path], temp.path());
    assert_success(&emulated, "the aarch64 fixture under qemu");
    let emulated: Value = serde_json::from_slice(&emulated.stdout).unwrap();
    let native: Value = serde_json::from_str(&run_fixture("nn-mlp", &[path])).unwrap();
    for output in ["forward", "embed"] {
        assert_tensors_close(output, &emulated[output], &native[output], 1e-5);
    }
}

#[test]
fn aarch64_release_builds_offline_from_prepared_artifacts_with_python_hidden() {
    let temp = tempfile::tempdir().unwrap();
    let app = temp.path().join("app");
    copy_fixture("two-models", &app, "cross-offline");
    let manifest = app.join("Cargo.toml");
    let cache = temp.path().join("cache");
    let output = cargo_relax(
        &[
            "prepare",
            "--manifest-path",
            manifest.to_str().unwrap(),
            "--target",
            CROSS_TARGET,
        ],
        &[("RELAX_CACHE_DIR", cache.to_str().unwrap())],
    );
    assert_success(&output, "cargo relax prepare --target aarch64");
    assert!(app
        .join(".relax/offset")
        .join(CROSS_TARGET)
        .join("library.so")
        .is_file());

    let build = std::process::Command::new("cargo")
        .current_dir(&app)
        .args(["build", "--quiet", "--release", "--target", CROSS_TARGET])
        .env("CARGO_TARGET_DIR", fixture_target_dir())
        .env("PATH", path_without_python(temp.path()))
        .env("RELAX_OFFLINE", "1")
        .env("RELAX_PYTHON", "/nonexistent/python3")
        .env("RELAX_CACHE_DIR", temp.path().join("empty-cache"))
        .env(CROSS_LINKER.0, CROSS_LINKER.1)
        .env_remove("VIRTUAL_ENV")
        .output()
        .unwrap();
    assert_success(&build, "offline aarch64 build with Python hidden");

    let executable = fixture_target_dir()
        .join(CROSS_TARGET)
        .join("release/fixture-two-models-cross-offline");
    let output = run_under_qemu(&executable, &[], temp.path());
    assert_success(&output, "the offline-built aarch64 app under qemu");
    assert_eq!(
        stdout(&output),
        "offset: [11.0, 12.0, 13.0, 14.0]\ndouble: [2.0, 4.0, 6.0, 8.0]\n"
    );

    // `prepare --check` without --target checks every prepared target (aarch64 here) and
    // the host, and counts every stale or missing artifact.
    let source = app.join("models/double.py");
    let text = std::fs::read_to_string(&source).unwrap();
    std::fs::write(&source, format!("{text}\n# changed\n")).unwrap();
    let check = cargo_relax(
        &[
            "prepare",
            "--check",
            "--manifest-path",
            manifest.to_str().unwrap(),
        ],
        &[("RELAX_CACHE_DIR", cache.to_str().unwrap())],
    );
    assert!(
        !check.status.success(),
        "a stale aarch64 artifact fails the check"
    );
    let report = stdout(&check);
    assert!(
        report.contains(&format!(
            "stale  `double` ({CROSS_TARGET}): `models/double.py` changed"
        )),
        "{report}"
    );
    assert!(
        report.contains(&format!("ok     `offset` ({CROSS_TARGET})")),
        "{report}"
    );
    // The host was never prepared: both models are missing there; 3 in all.
    assert!(
        String::from_utf8_lossy(&check.stderr)
            .contains("error: 3 prepared artifact(s) do not match"),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

/// A cross build of a copy of the two-models fixture linked by the host's `g++`, with
/// `extra` environment; it must fail with every one of `expected` in its stderr.
fn host_compiler_build_fails(suffix: &str, extra: &[(&str, &str)], expected: &[&str]) {
    let temp = tempfile::tempdir().unwrap();
    let app = temp.path().join("app");
    copy_fixture("two-models", &app, suffix);
    let cache = temp.path().join("cache");
    let mut env = vec![
        ("CXX_aarch64_unknown_linux_gnu", "g++"),
        ("RELAX_CACHE_DIR", cache.to_str().unwrap()),
        CROSS_LINKER,
    ];
    env.extend_from_slice(extra);
    let build = cargo(&app, &["build", "--quiet", "--target", CROSS_TARGET], &env);
    assert!(
        !build.status.success(),
        "the host compiler for an aarch64 build must fail it"
    );
    let stderr = String::from_utf8_lossy(&build.stderr);
    for expected in expected {
        assert!(
            stderr.contains(expected),
            "expected {expected:?} in:\n{stderr}"
        );
    }
}

#[test]
fn a_library_for_the_wrong_architecture_is_refused() {
    // The host's compiler and an x86-64 mtriple: TVM links an x86-64 library for an aarch64 build.
    let x86 = r#"{"mtriple": "x86_64-unknown-linux-gnu", "mattr": []}"#;
    host_compiler_build_fails(
        "cross-wrong-arch",
        &[("RELAX_OFFSET_TARGET", x86), ("RELAX_DOUBLE_TARGET", x86)],
        &[
            "model `offset`: the compiled library is x86-64 code, but the Cargo target aarch64-unknown-linux-gnu needs AArch64 code",
            "it was linked by `g++` (from CXX_aarch64_unknown_linux_gnu)",
            "Fix: point CXX_aarch64_unknown_linux_gnu at the target's C++ compiler (e.g. aarch64-linux-gnu-g++)",
        ],
    );
}

#[test]
fn a_host_compiler_for_a_cross_target_fails_with_the_fix() {
    host_compiler_build_fails(
        "cross-host-cc",
        &[],
        &[
            "model `offset`: linking the library for aarch64-unknown-linux-gnu with `g++` (from CXX_aarch64_unknown_linux_gnu) failed",
            "Fix: point CXX_aarch64_unknown_linux_gnu at a C++ compiler for aarch64-unknown-linux-gnu",
            "file in wrong format",
        ],
    );
}
