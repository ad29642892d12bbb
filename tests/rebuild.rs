//! A build with nothing changed starts no Python, and the built executable carries its
//! model: it runs from another folder after the build's OUT_DIR is deleted.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use relax_cargo_tests::{
    assert_success, cargo, fixture, fixture_target_dir, json_file, toolchain_python, workspace_root,
};
use serde_json::{json, Value};

const PACKAGE: &str = "rebuild-probe-app";

/// Copies the TVMScript fixture to `dir` under another package name, with absolute paths.
fn copy_fixture(dir: &Path) {
    let source = fixture("tvmscript-pair");
    std::fs::create_dir_all(dir.join("models")).unwrap();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    for file in ["build.rs", "models/pair.py", "src/main.rs"] {
        std::fs::copy(source.join(file), dir.join(file)).unwrap();
    }
    let manifest = std::fs::read_to_string(source.join("Cargo.toml"))
        .unwrap()
        .replace("fixture-tvmscript-pair", PACKAGE)
        .replace("../../", &format!("{}/", workspace_root().display()));
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
}

fn python_starts(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

#[test]
fn no_op_build_starts_no_python_and_the_binary_carries_its_model() {
    let temp = tempfile::tempdir().unwrap();
    let app = temp.path().join("app");
    copy_fixture(&app);
    let log = temp.path().join("python-starts.log");
    let wrapper = temp.path().join("python-wrapper");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            toolchain_python().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let env = [("RELAX_PYTHON", wrapper.to_str().unwrap())];

    assert_success(&cargo(&app, &["build", "--quiet"], &env), "first build");
    let first = python_starts(&log);
    assert!(
        first >= 2,
        "the first build probes the toolchain and runs the driver ({first} starts)"
    );

    assert_success(&cargo(&app, &["build", "--quiet"], &env), "second build");
    assert_eq!(
        python_starts(&log),
        first,
        "a build with nothing changed must not start Python"
    );

    let source = app.join("models/pair.py");
    let text = std::fs::read_to_string(&source).unwrap();
    std::fs::write(&source, format!("{text}\n# touched\n")).unwrap();
    assert_success(
        &cargo(&app, &["build", "--quiet"], &env),
        "build after touching the model",
    );
    assert!(
        python_starts(&log) > first,
        "changing the model source must recompile it"
    );

    // The executable, copied elsewhere, runs after its OUT_DIR is gone.
    let elsewhere = temp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let binary = elsewhere.join(PACKAGE);
    std::fs::copy(fixture_target_dir().join("debug").join(PACKAGE), &binary).unwrap();
    for entry in std::fs::read_dir(fixture_target_dir().join("debug/build")).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(PACKAGE)
        {
            std::fs::remove_dir_all(&path).unwrap();
        }
    }
    let inputs = json_file(&json!({
        "a": {"shape": [1, 4], "data": [1.0, 2.0, 3.0, 4.0]},
        "b": {"shape": [1, 4], "data": [0.5, 0.5, 0.5, 0.5]},
        "x": {"shape": [2, 3], "data": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]},
    }));
    let output = std::process::Command::new(&binary)
        .arg(inputs.path())
        .current_dir(&elsewhere)
        .output()
        .unwrap();
    assert_success(&output, "the copied executable");
    let outputs: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(outputs["total"]["data"], json!([1.5, 2.5, 3.5, 4.5]));
    assert_eq!(
        outputs["scaled"]["data"],
        json!([2.5, 5.0, 7.5, 10.0, 12.5, 15.0])
    );

    // The runtime libraries are searched in RELAX_RUNTIME_DIR first, then next to the
    // executable: a broken libtvm_ffi.so in each place is what the error names.
    let override_dir = temp.path().join("override");
    std::fs::create_dir_all(&override_dir).unwrap();
    for dir in [&override_dir, &elsewhere] {
        std::fs::write(dir.join("libtvm_ffi.so"), b"not a library").unwrap();
        std::fs::write(dir.join("libtvm_runtime.so"), b"not a library").unwrap();
    }
    let run = |env: &[(&str, &Path)]| {
        let mut command = std::process::Command::new(&binary);
        command
            .arg(inputs.path())
            .current_dir(temp.path())
            .env_remove("RELAX_RUNTIME_DIR");
        for (name, value) in env {
            command.env(name, value);
        }
        let output = command.output().unwrap();
        assert!(
            !output.status.success(),
            "a broken runtime library must fail the load"
        );
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let stderr = run(&[("RELAX_RUNTIME_DIR", &override_dir)]);
    let expected = format!(
        "relax-runtime could not load {}",
        override_dir.join("libtvm_ffi.so").display()
    );
    assert!(
        stderr.contains(&expected),
        "expected {expected:?} in:\n{stderr}"
    );
    let stderr = run(&[]);
    let expected = format!(
        "relax-runtime could not load {}",
        elsewhere.join("libtvm_ffi.so").display()
    );
    assert!(
        stderr.contains(&expected),
        "expected {expected:?} in:\n{stderr}"
    );
}
