//! What relax-runtime refuses instead of crashing, and what it needs from the system:
//! no writable temporary folder, a damaged executable caught by its recorded sha256,
//! and library files that are truncated, for another machine, of another model, or
//! named relative to the current folder; and names in a model that would break the
//! generated code if written raw.

use std::path::{Path, PathBuf};

use relax_cargo_tests::{
    assert_success, built_model_dir, cargo, fixture, fixture_target_dir, stderr, stdout,
    workspace_root,
};

/// The release quickstart, built once (the quickstart test builds the same).
fn quickstart() -> PathBuf {
    let output = cargo(
        workspace_root(),
        &["build", "--quiet", "--release", "-p", "quickstart"],
        &[],
    );
    assert_success(&output, "cargo build -p quickstart");
    fixture_target_dir().join("release/quickstart")
}

#[test]
fn models_load_with_no_writable_temporary_folder() {
    let output = std::process::Command::new(quickstart())
        .env("TMPDIR", "/nonexistent/tmp")
        .output()
        .unwrap();
    assert_success(&output, "the quickstart with TMPDIR=/nonexistent/tmp");
    assert!(
        stdout(&output).starts_with("accuracy: 0.9722"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn a_damaged_executable_is_refused_before_its_model_loads() {
    let binary = quickstart();
    let library =
        std::fs::read(built_model_dir("release", "quickstart", "digits").join("library.so"))
            .unwrap();
    let mut bytes = std::fs::read(&binary).unwrap();
    let at = bytes
        .windows(library.len())
        .position(|window| window == library.as_slice())
        .expect("the executable embeds the model library");
    bytes[at + library.len() / 2] ^= 0x5a;
    let temp = tempfile::tempdir().unwrap();
    let damaged = temp.path().join("quickstart");
    std::fs::write(&damaged, &bytes).unwrap();
    std::fs::set_permissions(
        &damaged,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let output = run_fresh_executable(&damaged);
    assert!(!output.status.success(), "a damaged model must not run");
    let message = stderr(&output);
    assert!(
        message.contains("model `digits`: the library embedded for model `digits` has sha256 ")
            && message.contains("but relax-build recorded ")
            && message.contains("the executable is damaged; build it again"),
        "{message}"
    );
}

/// Runs an executable this test process just wrote. Another test's child process, forked
/// while the file was open for writing, holds that descriptor until it execs, and exec
/// meanwhile fails with "Text file busy" (ETXTBSY): retried for up to 5 s.
fn run_fresh_executable(path: &Path) -> std::process::Output {
    let mut waited = std::time::Duration::ZERO;
    loop {
        match std::process::Command::new(path).output() {
            Err(error)
                if error.kind() == std::io::ErrorKind::ExecutableFileBusy
                    && waited < std::time::Duration::from_secs(5) =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
                waited += std::time::Duration::from_millis(20);
            }
            result => return result.unwrap(),
        }
    }
}

/// The nn-mlp fixture's executable, built.
fn nn_mlp() -> PathBuf {
    let output = cargo(&fixture("nn-mlp"), &["build", "--quiet"], &[]);
    assert_success(&output, "cargo build of the nn-mlp fixture");
    fixture_target_dir().join("debug/fixture-nn-mlp")
}

/// Runs the nn-mlp fixture's `load-file` mode in `dir`.
fn load_file(dir: &Path, library: &str, signature: &Path) -> String {
    let output = std::process::Command::new(nn_mlp())
        .args(["load-file", library])
        .arg(signature)
        .current_dir(dir)
        .output()
        .unwrap();
    assert_success(&output, "fixture-nn-mlp load-file");
    stdout(&output)
}

#[test]
fn library_files_that_cannot_work_are_refused_with_a_reason() {
    let binary = nn_mlp();
    let model = built_model_dir("debug", "fixture-nn-mlp", "tiny_mlp");
    let signature = model.join("signature.json");
    let bytes = std::fs::read(model.join("library.so")).unwrap();
    let temp = tempfile::tempdir().unwrap();

    // A bare relative name is the file in the current folder (dlopen would search its paths).
    std::fs::write(temp.path().join("t.so"), &bytes).unwrap();
    let weights = model.join("weights.safetensors");
    let output = std::process::Command::new(&binary)
        .args(["load-file", "t.so"])
        .arg(&signature)
        .arg(&weights)
        .current_dir(temp.path())
        .output()
        .unwrap();
    assert_eq!(
        stdout(&output),
        "loaded embed, forward\n",
        "{}",
        stderr(&output)
    );

    let truncated = temp.path().join("truncated.so");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let message = load_file(temp.path(), truncated.to_str().unwrap(), &signature);
    assert!(
        message.contains("is truncated or damaged: its headers describe more than its"),
        "{message}"
    );

    let mut aarch64 = bytes.clone();
    aarch64[18..20].copy_from_slice(&183u16.to_le_bytes());
    let foreign = temp.path().join("aarch64.so");
    std::fs::write(&foreign, &aarch64).unwrap();
    let message = load_file(temp.path(), foreign.to_str().unwrap(), &signature);
    assert!(
        message.contains("is AArch64 code, but this process runs on x86-64; load the library compiled for this machine's target"),
        "{message}"
    );

    // The signature of another model over this library.
    let other = temp.path().join("other.json");
    std::fs::write(
        &other,
        r#"{"model": "sym", "target": "{}", "functions": [{"name": "colsum", "inputs": [], "weights": [], "outputs": [], "returns_tuple": false}]}"#,
    )
    .unwrap();
    std::fs::write(temp.path().join("mlp.so"), &bytes).unwrap();
    let message = load_file(temp.path(), "mlp.so", &other);
    assert!(
        message.contains(
            "model `sym` has no function `colsum`; it has: (the signature declares it, but "
        ) && message.contains("does not define it: is it the library of another model?)"),
        "{message}"
    );
}

/// A model whose function and argument names hold a newline, `*/`, backticks, quotes, a
/// backslash, a text-direction mark and non-ASCII letters builds through the real path
/// (the driver's signature, relax-build's code generation), its wrapper compiles with
/// the names escaped in its docs and sanitised into identifiers, and it runs.
#[test]
fn names_that_could_break_generated_code_build_and_run() {
    let output = relax_cargo_tests::run_fixture("hostile-names", &[]);
    assert_eq!(
        output,
        "[4.0, 6.0, 8.0, 10.0, 12.0, 14.0]\n\
         \"add\\n*/ `tick` \\\"quoted\\\" ünï\"\n\
         [\"x\\npub fn injected() {}\", \"*/ /* `b` \\\"c\\\" \\\\\", \"ünïcode\\u{202e}\"]\n"
    );
    let module = built_model_dir("debug", "fixture-hostile-names", "hostile")
        .parent()
        .unwrap()
        .join("hostile.rs");
    let generated = std::fs::read_to_string(&module).unwrap();
    assert!(
        generated.contains(
            "        /// `add\\n*/ \\u{60}tick\\u{60} \"quoted\" ünï(x\\npub fn injected() {}: float32[2, 3], \
             */ /* \\u{60}b\\u{60} \"c\" \\\\: float32[2, 3], ünïcode\\u{202e}: float32[2, 3]) -> float32[2, 3]`\n"
        ),
        "{generated}"
    );
    assert!(!generated.contains('\u{202e}'), "{generated}");
}
