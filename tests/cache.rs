//! The content-addressed cache: no-op builds start no Python, a change recompiles only
//! the model it touches, a corrupted entry is rebuilt, and two builds at once share one entry.

use relax_cargo_tests::{assert_success, fixture_target_dir, stdout, IsolatedApp};

fn entries(app: &IsolatedApp) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(app.cache_dir.join("entries"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_dir())
        .collect()
}

#[test]
fn only_changed_models_recompile_and_unchanged_ones_start_no_python() {
    let app = IsolatedApp::new("two-models", "cache-one-model");
    app.build("first build");
    let mut first = app.python.starts();
    first.sort();
    assert_eq!(first, ["driver double", "driver offset", "probe"]);

    app.build("no-op build");
    assert_eq!(
        app.python.starts().len(),
        3,
        "a no-op build starts no Python"
    );

    // The build script reruns (the manifest changed) but every model is cached and the
    // toolchain probe is cached: still no Python.
    app.append("Cargo.toml", "# touched\n");
    app.build("build after touching Cargo.toml");
    assert_eq!(
        app.python.starts().len(),
        3,
        "cached models start no Python even when the build script reruns"
    );

    std::fs::write(
        app.dir.join("models/helpers/constants.py"),
        "OFFSET = 100.0\n",
    )
    .unwrap();
    app.build("build after changing an included helper");
    assert_eq!(
        app.python.starts()[3..],
        ["driver offset"],
        "only the model that includes the helper recompiles"
    );

    let double = app.dir.join("models/double.py");
    let text = std::fs::read_to_string(&double).unwrap();
    std::fs::write(&double, text.replace("2.0", "3.0")).unwrap();
    app.build("build after changing one model");
    assert_eq!(
        app.python.starts()[4..],
        ["driver double"],
        "only the changed model recompiles"
    );

    let output = app.cargo(&["run", "--quiet"]);
    assert_success(&output, "run");
    assert_eq!(
        stdout(&output),
        "offset: [101.0, 102.0, 103.0, 104.0]\ndouble: [3.0, 6.0, 9.0, 12.0]\n"
    );
}

#[test]
fn a_corrupted_cache_entry_is_reported_and_rebuilt() {
    let app = IsolatedApp::new("two-models", "cache-corrupt");
    app.build("first build");
    let entries = entries(&app);
    assert_eq!(entries.len(), 2, "one entry per model");
    // Truncate one entry's library.
    let library = entries[0].join("library.so");
    let bytes = std::fs::read(&library).unwrap();
    std::fs::write(&library, &bytes[..bytes.len() / 2]).unwrap();

    app.append("Cargo.toml", "# touched\n");
    let output = app.cargo(&["build"]);
    assert_success(&output, "build with a corrupted entry");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let expected = format!(
        "cache entry {} is corrupted (library.so does not match its recorded sha256); removing it and compiling again",
        entries[0].display()
    );
    assert!(
        stderr.contains(&expected),
        "expected {expected:?} in:\n{stderr}"
    );
    assert_eq!(
        app.python
            .starts()
            .iter()
            .filter(|start| start.starts_with("driver"))
            .count(),
        3
    );
    assert_eq!(
        std::fs::read(&library).unwrap(),
        bytes,
        "the rebuilt entry is whole again"
    );

    let output = app.cargo(&["run", "--quiet"]);
    assert_success(&output, "run");
    assert_eq!(
        stdout(&output),
        "offset: [11.0, 12.0, 13.0, 14.0]\ndouble: [2.0, 4.0, 6.0, 8.0]\n"
    );
}

#[test]
fn two_builds_of_the_same_model_at_once_share_one_entry() {
    let workspace = IsolatedApp::new("shared-workspace", "concurrent");
    // One cargo invocation runs both members' build scripts in parallel (-j 2).
    assert_success(
        &workspace.cargo(&["build", "--quiet", "-j", "2"]),
        "workspace build",
    );
    let drivers: Vec<_> = workspace
        .python
        .starts()
        .into_iter()
        .filter(|start| start.starts_with("driver"))
        .collect();
    assert_eq!(
        drivers,
        ["driver double"],
        "the second build waits for the first and reuses its entry"
    );
    assert_eq!(entries(&workspace).len(), 1);
    let leftovers = std::fs::read_dir(workspace.cache_dir.join("tmp"))
        .unwrap()
        .count();
    assert_eq!(leftovers, 0, "no half-written entry is left");
    for member in ["shared-member-a-concurrent", "shared-member-b-concurrent"] {
        let output = std::process::Command::new(fixture_target_dir().join("debug").join(member))
            .output()
            .unwrap();
        assert_success(&output, member);
        assert_eq!(stdout(&output), "double: [2.0, 4.0, 6.0, 8.0]\n");
    }
}
