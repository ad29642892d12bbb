//! Prepared artifacts (`cargo relax prepare`): offline builds with Python hidden, and
//! stale or tampered artifacts refused with the command that fixes them.

use relax_cargo_tests::{
    assert_success, cargo_relax, copy_fixture, fixture_target_dir, path_without_python,
};

const TARGET: &str = "x86_64-unknown-linux-gnu";

/// A copy of the two-models fixture with prepared artifacts, and its own cache.
struct PreparedApp {
    temp: tempfile::TempDir,
}

impl PreparedApp {
    fn new(suffix: &str) -> PreparedApp {
        let temp = tempfile::tempdir().unwrap();
        copy_fixture("two-models", &temp.path().join("app"), suffix);
        let app = PreparedApp { temp };
        let output = cargo_relax(
            &[
                "prepare",
                "--manifest-path",
                app.manifest().to_str().unwrap(),
                "--target",
                TARGET,
            ],
            &[("RELAX_CACHE_DIR", app.cache().to_str().unwrap())],
        );
        assert_success(&output, "cargo relax prepare");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            stdout.contains(&format!("prepared `offset` for {TARGET} (compiled)")),
            "{stdout}"
        );
        assert!(app
            .dir()
            .join(".relax/double")
            .join(TARGET)
            .join("manifest.json")
            .is_file());
        app
    }

    fn dir(&self) -> std::path::PathBuf {
        self.temp.path().join("app")
    }

    fn manifest(&self) -> std::path::PathBuf {
        self.dir().join("Cargo.toml")
    }

    fn cache(&self) -> std::path::PathBuf {
        self.temp.path().join("cache")
    }

    /// `cargo build` with no Python anywhere: RELAX_PYTHON points nowhere, PATH has none,
    /// and the managed toolchain folder is empty and cannot be provisioned.
    fn build_without_python(&self, extra: &[(&str, &str)]) -> std::process::Output {
        let mut command = std::process::Command::new("cargo");
        command
            .current_dir(self.dir())
            .args(["build", "--quiet"])
            .env("CARGO_TARGET_DIR", fixture_target_dir())
            .env("PATH", path_without_python(self.temp.path()))
            .env("RELAX_TOOLCHAIN_DIR", self.temp.path().join("no-toolchain"))
            .env("RELAX_BOOTSTRAP_PYTHON", "/nonexistent/python3")
            .env("RELAX_CACHE_DIR", self.temp.path().join("empty-cache"))
            .env_remove("VIRTUAL_ENV")
            .env_remove("RELAX_PYTHON")
            .envs(extra.iter().copied());
        command.output().unwrap()
    }
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn offline_build_with_python_hidden_uses_prepared_artifacts() {
    let app = PreparedApp::new("offline-hidden");
    let output = app.build_without_python(&[
        ("RELAX_OFFLINE", "1"),
        ("RELAX_PYTHON", "/nonexistent/python3"),
    ]);
    assert_success(&output, "offline build with Python hidden");

    // The same without RELAX_OFFLINE: no Python can be found, so the prepared artifacts are used.
    let text = std::fs::read_to_string(app.manifest()).unwrap();
    std::fs::write(app.manifest(), format!("{text}# touched\n")).unwrap();
    let output = app.build_without_python(&[]);
    assert_success(&output, "build with no Python at all");

    // The build recorded no runtime library folder (it found no toolchain), so the app
    // gets both libraries from RELAX_RUNTIME_DIR.
    let runtime_dir = app.temp.path().join("runtime");
    std::fs::create_dir_all(&runtime_dir).unwrap();
    let toolchain = relax_build::tooling::toolchain(
        &relax_build::Config::new()
            .cargo_directives(false)
            .cache_dir(app.cache()),
    )
    .unwrap();
    for dir in &toolchain.runtime_library_dirs {
        for library in ["libtvm_ffi.so", "libtvm_runtime.so"] {
            if dir.join(library).is_file() {
                std::os::unix::fs::symlink(dir.join(library), runtime_dir.join(library)).unwrap();
            }
        }
    }
    let binary = fixture_target_dir().join("debug/fixture-two-models-offline-hidden");
    let output = std::process::Command::new(binary)
        .env("RELAX_RUNTIME_DIR", &runtime_dir)
        .output()
        .unwrap();
    assert_success(&output, "the offline-built app");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "offset: [11.0, 12.0, 13.0, 14.0]\ndouble: [2.0, 4.0, 6.0, 8.0]\n"
    );
}

#[test]
fn a_stale_prepared_artifact_is_refused_with_the_command_to_run() {
    let app = PreparedApp::new("offline-stale");
    let source = app.dir().join("models/double.py");
    let text = std::fs::read_to_string(&source).unwrap();
    std::fs::write(&source, text.replace("2.0", "4.0")).unwrap();

    let output = app.build_without_python(&[("RELAX_OFFLINE", "1")]);
    assert!(
        !output.status.success(),
        "a stale prepared artifact must fail an offline build"
    );
    let stderr = stderr(&output);
    for expected in [
        "model `double`: the prepared artifact ",
        "is stale (`models/double.py` changed), and offline builds (RELAX_OFFLINE=1 or CARGO_NET_OFFLINE=true) use only prepared artifacts.",
        &format!(
            "Fix: run `cargo relax prepare --manifest-path {} --target {TARGET}`",
            app.manifest().display()
        ),
    ] {
        assert!(stderr.contains(expected), "expected {expected:?} in:\n{stderr}");
    }

    let output = cargo_relax(
        &[
            "prepare",
            "--check",
            "--manifest-path",
            app.manifest().to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        !output.status.success(),
        "prepare --check fails on a stale artifact"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!(
            "stale  `double` ({TARGET}): `models/double.py` changed"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("ok     `offset` ({TARGET})")),
        "{stdout}"
    );
    assert!(stderr_of(&output).contains("run `cargo relax prepare --manifest-path"));
}

fn stderr_of(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_tampered_prepared_artifact_is_refused() {
    let app = PreparedApp::new("offline-tampered");
    let library = app
        .dir()
        .join(".relax/offset")
        .join(TARGET)
        .join("library.so");
    let mut bytes = std::fs::read(&library).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&library, bytes).unwrap();

    let output = app.build_without_python(&[("RELAX_OFFLINE", "1")]);
    assert!(
        !output.status.success(),
        "a tampered artifact must not be used"
    );
    let stderr = stderr(&output);
    let expected = "is refused: library.so does not match its recorded sha256";
    assert!(
        stderr.contains(expected),
        "expected {expected:?} in:\n{stderr}"
    );
}
