//! Prepared artifacts (`cargo relax prepare`): builds on a machine with no Python, no
//! cache and no toolchain, and stale or tampered artifacts refused with the command
//! that fixes them.

use relax_cargo_tests::{assert_success, fixture_target_dir, stderr, stdout, IsolatedApp, HOST};

/// A copy of the two-models fixture with prepared artifacts for the host.
fn prepared_app(suffix: &str) -> IsolatedApp {
    let app = IsolatedApp::new("two-models", suffix);
    let output = app.cargo_relax(&["prepare", "--target", HOST]);
    assert_success(&output, "cargo relax prepare");
    assert!(
        stdout(&output).contains(&format!("prepared `offset` for {HOST} (compiled)")),
        "{}",
        stdout(&output)
    );
    // The progress bar is drawn on terminals only; here stderr is a pipe.
    assert!(
        !stderr(&output).contains("preparing for") && !stderr(&output).contains("compiling `"),
        "no progress drawn off a terminal: {}",
        stderr(&output)
    );
    let prepared = app.dir.join(".relax");
    assert!(prepared
        .join("double")
        .join(HOST)
        .join("manifest.json")
        .is_file());
    for library in ["libtvm_ffi.so", "libtvm_runtime.so"] {
        assert!(
            prepared.join("runtime").join(HOST).join(library).is_file(),
            "prepare keeps the target's {library} for machines without TVM"
        );
    }
    app
}

/// A machine that never saw TVM: with only the prepared folder, the app builds (offline
/// or not) and its binary runs, with no environment variable and an empty home.
#[test]
fn a_clean_machine_builds_and_runs_from_the_prepared_folder() {
    let app = prepared_app("offline-clean");
    let home = app.temp().join("empty-home");
    std::fs::create_dir_all(&home).unwrap();
    let home = home.to_str().unwrap();
    let output = app.cargo_without_python(
        &["build", "--quiet"],
        &[("RELAX_OFFLINE", "1"), ("HOME", home)],
    );
    assert_success(&output, "offline build with no Python");

    // The same without RELAX_OFFLINE: no Python can be found, so the prepared artifacts are used.
    app.append("Cargo.toml", "# touched\n");
    let output = app.cargo_without_python(&["build", "--quiet"], &[("HOME", home)]);
    assert_success(&output, "build with no Python at all");

    let binary = fixture_target_dir().join("debug/fixture-two-models-offline-clean");
    let output = std::process::Command::new(binary)
        .env_remove("RELAX_RUNTIME_DIR")
        .env_remove("RELAX_TOOLCHAIN_DIR")
        .env_remove("XDG_CACHE_HOME")
        .env("HOME", home)
        .output()
        .unwrap();
    assert_success(&output, "the app built on a clean machine");
    assert_eq!(
        stdout(&output),
        "offset: [11.0, 12.0, 13.0, 14.0]\ndouble: [2.0, 4.0, 6.0, 8.0]\n"
    );
}

#[test]
fn a_stale_prepared_artifact_is_refused_with_the_command_to_run() {
    let app = prepared_app("offline-stale");
    let source = app.dir.join("models/double.py");
    let text = std::fs::read_to_string(&source).unwrap();
    std::fs::write(&source, text.replace("2.0", "4.0")).unwrap();

    let output = app.cargo_without_python(&["build", "--quiet"], &[("RELAX_OFFLINE", "1")]);
    assert!(
        !output.status.success(),
        "a stale prepared artifact must fail an offline build"
    );
    let stderr_text = stderr(&output);
    for expected in [
        "model `double`: the prepared artifact ",
        "is stale (`models/double.py` changed), and offline builds (RELAX_OFFLINE=1 or CARGO_NET_OFFLINE=true) use only prepared artifacts.",
        &format!(
            "Fix: run `cargo relax prepare --manifest-path {} --target {HOST}`",
            app.manifest().display()
        ),
    ] {
        assert!(
            stderr_text.contains(expected),
            "expected {expected:?} in:\n{stderr_text}"
        );
    }

    let output = app.cargo_relax(&["prepare", "--check"]);
    assert!(
        !output.status.success(),
        "prepare --check fails on a stale artifact"
    );
    let stdout_text = stdout(&output);
    assert!(
        stdout_text.contains(&format!(
            "stale  `double` ({HOST}): `models/double.py` changed"
        )),
        "{stdout_text}"
    );
    assert!(
        stdout_text.contains(&format!("ok     `offset` ({HOST})")),
        "{stdout_text}"
    );
    assert!(stderr(&output).contains("error: 1 prepared artifact(s) do not match"));
    assert!(stderr(&output).contains("run `cargo relax prepare --manifest-path"));
}

#[test]
fn a_tampered_prepared_artifact_is_refused() {
    let app = prepared_app("offline-tampered");
    let library = app.dir.join(".relax/offset").join(HOST).join("library.so");
    let mut bytes = std::fs::read(&library).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&library, bytes).unwrap();

    let output = app.cargo_without_python(&["build", "--quiet"], &[("RELAX_OFFLINE", "1")]);
    assert!(
        !output.status.success(),
        "a tampered artifact must not be used"
    );
    let expected = "is refused: library.so does not match its recorded sha256";
    assert!(
        stderr(&output).contains(expected),
        "expected {expected:?} in:\n{}",
        stderr(&output)
    );
}

/// `cargo relax bundle` where no TVM runtime libraries for the target can be found (no
/// toolchain, none prepared): an error saying what is missing and how to get it, and no
/// half-made bundle folder.
#[test]
fn a_bundle_without_runtime_libraries_says_how_to_get_them_and_leaves_nothing() {
    let app = IsolatedApp::new("two-models", "bundle-missing");
    app.build("building the app to bundle");
    let out = app.temp().join("dist");
    let manifest = app.manifest();
    let empty = app.temp().join("no-toolchain");
    let output = relax_cargo_tests::cargo_relax(
        &[
            "bundle",
            "--manifest-path",
            manifest.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &[
            ("RELAX_TOOLCHAIN_DIR", empty.to_str().unwrap()),
            ("RELAX_BOOTSTRAP_PYTHON", "/nonexistent/python3"),
            ("RELAX_PYTHON", "/nonexistent/python3"),
            ("RELAX_OFFLINE", "1"),
        ],
    );
    assert!(
        !output.status.success(),
        "bundling without runtime libraries fails"
    );
    let message = stderr(&output);
    assert!(
        message.contains("libtvm_"),
        "names the missing library: {message}"
    );
    assert!(
        message.contains(&format!("Fix: run `cargo relax prepare --target {HOST}`")),
        "says how to get them: {message}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(&out)
        .map(|dir| dir.collect())
        .unwrap_or_default();
    assert!(
        leftovers.is_empty(),
        "nothing half-made in {}: {leftovers:?}",
        out.display()
    );
}
