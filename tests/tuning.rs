//! Tuning as a build input: a build never tunes (it warns when `tune` has no records),
//! `cargo relax tune` writes records, and the next build applies them (the records are
//! part of the key, so it recompiles, and again when they change).

use relax_cargo_tests::{assert_success, cargo_relax, IsolatedApp};

/// A copy of the two-models fixture whose `double` declares `tune = { trials }`, with
/// `extra` appended to its manifest.
fn two_models_tuning_double(suffix: &str, trials: u32, extra: &str) -> IsolatedApp {
    let app = IsolatedApp::new("two-models", suffix);
    let manifest = app.manifest();
    let text = std::fs::read_to_string(&manifest).unwrap();
    let tuned = text.replace(
        "entry = \"Double\"",
        &format!("entry = \"Double\"\ntune = {{ trials = {trials} }}"),
    );
    std::fs::write(&manifest, tuned + extra).unwrap();
    app
}

#[test]
fn records_from_cargo_relax_tune_are_applied_and_keyed() {
    let app = two_models_tuning_double("tuning", 4, "");
    let manifest = app.manifest();

    let output = app.cargo(&["build"]);
    assert_success(&output, "build without records");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let expected = "model `double` has tune = { trials = 4 } but no tuning records for x86_64-unknown-linux-gnu; it is compiled untuned";
    assert!(
        stderr.contains(expected),
        "expected {expected:?} in:\n{stderr}"
    );
    let after_build = app.python.starts().len();

    let env = [
        ("RELAX_PYTHON", app.python.wrapper.to_str().unwrap()),
        ("RELAX_CACHE_DIR", app.cache_dir.to_str().unwrap()),
    ];
    let output = cargo_relax(
        &["tune", "--manifest-path", manifest.to_str().unwrap()],
        &env,
    );
    assert_success(&output, "cargo relax tune");
    let records = app
        .dir
        .join(".relax/tuning/double/x86_64-unknown-linux-gnu");
    for file in ["database_workload.json", "database_tuning_record.json"] {
        assert!(records.join(file).is_file(), "{file} written");
    }
    assert!(
        !records.join("logs").exists(),
        "meta-schedule's logs are not left to commit"
    );
    assert_eq!(
        app.python.starts()[after_build..],
        ["driver double"],
        "only the model with `tune` is tuned"
    );

    let output = app.cargo(&["build"]);
    assert_success(&output, "build with records");
    assert!(!String::from_utf8_lossy(&output.stderr).contains("no tuning records"));
    assert_eq!(
        app.python.starts()[after_build + 1..],
        ["driver double"],
        "the records change the key: recompiled"
    );

    // A blank line (an editor's trailing newline) changes the key but not the records.
    app.append(
        ".relax/tuning/double/x86_64-unknown-linux-gnu/database_tuning_record.json",
        "\n",
    );
    app.build("build after the records changed");
    assert_eq!(
        app.python.starts()[after_build + 2..],
        ["driver double"],
        "changed records recompile"
    );

    app.append(
        ".relax/tuning/double/x86_64-unknown-linux-gnu/database_tuning_record.json",
        "{broken\n",
    );
    let output = app.cargo(&["build"]);
    assert!(!output.status.success(), "malformed records fail the build");
    let stderr = String::from_utf8_lossy(&output.stderr);
    for expected in [
        "model `double` (`package.metadata.relax.models.double.tune`)",
        "is not valid JSON",
        "run `cargo relax tune` again",
    ] {
        assert!(
            stderr.contains(expected),
            "expected {expected:?} in:\n{stderr}"
        );
    }
    let records_file = records.join("database_tuning_record.json");
    let text = std::fs::read_to_string(&records_file).unwrap();
    std::fs::write(
        &records_file,
        text.trim_end().trim_end_matches("{broken").trim_end(),
    )
    .unwrap();

    let output = app.cargo(&["run", "--quiet"]);
    assert_success(&output, "run with tuned code");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "offset: [11.0, 12.0, 13.0, 14.0]\ndouble: [2.0, 4.0, 6.0, 8.0]\n"
    );
}

/// A model whose source the build script generates (`$OUT_DIR/...`) exists only in a
/// build: `cargo relax tune` runs the build script to find it, tuning another model does
/// not, and the commands that need every model stop, naming it.
#[test]
fn cargo_relax_tune_runs_the_build_script_of_a_generated_source() {
    let app = two_models_tuning_double(
        "generated",
        2,
        "\n[package.metadata.relax.models.generated]\nsource = \"$OUT_DIR/generated.py\"\n\
         entry = \"Double\"\ntune = { trials = 2 }\n",
    );
    std::fs::write(
        app.dir.join("build.rs"),
        r#"fn main() {
    let out_dir = std::path::PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    std::fs::copy("models/double.py", out_dir.join("generated.py")).unwrap();
    println!("cargo::rerun-if-changed=models/double.py");
    relax_build::compile_models();
}
"#,
    )
    .unwrap();
    let generated_error =
        "`package.metadata.relax.models.generated.source`: `$OUT_DIR/generated.py` \
                           names a file the package's build script generates";

    for command in [&["prepare"][..], &["prepare", "--check"], &["info"]] {
        let output = app.cargo_relax(command);
        assert!(!output.status.success(), "{command:?} needs every model");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(generated_error), "{command:?}:\n{stderr}");
    }

    let output = app.cargo_relax(&["tune", "--model", "double"]);
    assert_success(&output, "tuning another model");
    assert_eq!(
        app.python.starts(),
        ["probe", "driver double"],
        "the toolchain probed once, then only `double` tuned: no build script ran"
    );

    let output = app.cargo_relax(&["tune", "--model", "generated"]);
    assert_success(&output, "tuning the generated model");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("running the build script of `fixture-two-models-generated`"),
        "{stderr}"
    );
    let later = app.python.starts()[2..].to_vec();
    assert_eq!(
        later
            .iter()
            .filter(|start| *start == "driver generated")
            .count(),
        2,
        "the build script compiled the generated model, then it was tuned: {later:?}"
    );
    assert_eq!(later.last().map(String::as_str), Some("driver generated"));
    for model in ["double", "generated"] {
        assert!(app
            .dir
            .join(format!(
                ".relax/tuning/{model}/x86_64-unknown-linux-gnu/database_tuning_record.json"
            ))
            .is_file());
    }

    let output = app.cargo(&["build"]);
    assert_success(&output, "build with both models' records");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("no tuning records"), "{stderr}");
}
