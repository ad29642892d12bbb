//! A build with nothing changed starts no Python, and the built executable carries its
//! model: it runs from another folder after the build's OUT_DIR is deleted.

use std::path::Path;

use relax_cargo_tests::{assert_success, fixture_target_dir, json_file, IsolatedApp};
use serde_json::{json, Value};

const PACKAGE: &str = "fixture-tvmscript-pair-rebuild";

#[test]
fn no_op_build_starts_no_python_and_the_binary_carries_its_model() {
    let app = IsolatedApp::new("tvmscript-pair", "rebuild");
    app.build("first build");
    assert_eq!(
        app.python.starts(),
        ["probe", "driver pair"],
        "the first build probes the toolchain and compiles"
    );

    app.build("second build");
    assert_eq!(
        app.python.starts().len(),
        2,
        "a build with nothing changed must not start Python"
    );

    app.append("models/pair.py", "\n# touched\n");
    app.build("build after changing the model");
    assert_eq!(
        app.python.starts()[2..],
        ["driver pair"],
        "changing the model source recompiles it"
    );

    // The executable, copied elsewhere, runs after its OUT_DIR is gone.
    let elsewhere = app.temp().join("elsewhere");
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
    let override_dir = app.temp().join("override");
    std::fs::create_dir_all(&override_dir).unwrap();
    for dir in [&override_dir, &elsewhere] {
        std::fs::write(dir.join("libtvm_ffi.so"), b"not a library").unwrap();
        std::fs::write(dir.join("libtvm_runtime.so"), b"not a library").unwrap();
    }
    let run = |env: &[(&str, &Path)]| {
        let mut command = std::process::Command::new(&binary);
        command
            .arg(inputs.path())
            .current_dir(app.temp())
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
