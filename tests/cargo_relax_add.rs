//! `cargo relax add`: declares a model from its file (the inputs found by inspecting it),
//! keeps the rest of the manifest as it was, and the app then builds and calls it.

use std::path::Path;

use relax_cargo_tests::{assert_success, cargo, cargo_relax, stderr, stdout, workspace_root};

/// A new app with relax-build and relax-runtime, a comment in its manifest, and no model.
fn new_app(dir: &Path) {
    let root = workspace_root();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"added\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             # Models are added by cargo relax add.\n\n\
             [build-dependencies]\nrelax-build = {{ path = {:?} }}\n\n\
             [dependencies]\nrelax-runtime = {{ path = {:?} }}\n\n[workspace]\n",
            root.join("relax-build"),
            root.join("relax-runtime")
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("build.rs"),
        "fn main() {\n    relax_build::compile_models();\n}\n",
    )
    .unwrap();
    std::fs::write(dir.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::create_dir_all(dir.join("models")).unwrap();
    std::fs::copy(
        root.join("examples/onnx-classifier/models/digits.onnx"),
        dir.join("models/digits.onnx"),
    )
    .unwrap();
    std::fs::copy(
        root.join("fixtures/errors/common/good.py"),
        dir.join("models/linear.py"),
    )
    .unwrap();
    std::fs::copy(
        root.join("fixtures/errors/common/linear.safetensors"),
        dir.join("models/linear.safetensors"),
    )
    .unwrap();
}

fn add(dir: &Path, args: &[&str]) -> std::process::Output {
    let manifest = dir.join("Cargo.toml");
    let mut all = vec!["add"];
    all.extend_from_slice(args);
    all.extend(["--manifest-path", manifest.to_str().unwrap()]);
    cargo_relax(&all, &[])
}

#[test]
fn added_models_are_declared_with_their_inputs_and_build() {
    let temp = tempfile::tempdir().unwrap();
    let app = temp.path().join("added");
    new_app(&app);
    let onnx = app.join("models/digits.onnx");
    let output = add(&app, &["digits", onnx.to_str().unwrap()]);
    assert_success(&output, "cargo relax add digits");
    assert!(
        stdout(&output).contains(
            "fn main(&self, pixels: &Tensor) -> Result<(Tensor, Tensor)>  // main(pixels: float32[batch, 64]) -> (float32[batch, 10], float32[batch, 10])"
        ),
        "{}",
        stdout(&output)
    );
    let python = app.join("models/linear.py");
    let weights = app.join("models/linear.safetensors");
    let output = add(
        &app,
        &[
            "linear",
            python.to_str().unwrap(),
            "--entry",
            "Linear",
            "--weights",
            weights.to_str().unwrap(),
            "--input",
            "forward.x=float32[batch, 4]",
        ],
    );
    assert_success(&output, "cargo relax add linear");

    let manifest = std::fs::read_to_string(app.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains("# Models are added by cargo relax add.\n"),
        "{manifest}"
    );
    assert!(
        manifest.contains(
            "[package.metadata.relax.models.digits]\nsource = \"models/digits.onnx\"\ninputs.main = { pixels = \"float32[batch, 64]\" }\n"
        ),
        "{manifest}"
    );
    assert!(
        manifest.contains(
            "[package.metadata.relax.models.linear]\nsource = \"models/linear.py\"\nentry = \"Linear\"\nweights = \"models/linear.safetensors\"\ninputs.forward = { x = \"float32[batch, 4]\" }\n"
        ),
        "{manifest}"
    );

    std::fs::write(
        app.join("src/main.rs"),
        "relax_runtime::include_model!(\"digits\");\nrelax_runtime::include_model!(\"linear\");\n\n\
         fn main() -> relax_runtime::Result<()> {\n\
             let pixels = relax_runtime::Tensor::from_slice(&[0f32; 2 * 64], &[2, 64])?;\n\
             let (logits, _) = digits::Model::load()?.main(&pixels)?;\n\
             let x = relax_runtime::Tensor::from_slice(&[0f32; 3 * 4], &[3, 4])?;\n\
             let y = linear::Model::load()?.forward(&x)?;\n\
             println!(\"{:?} {:?}\", logits.shape(), y.shape());\n\
             Ok(())\n}\n",
    )
    .unwrap();
    let run = cargo(&app, &["run", "--quiet"], &[]);
    assert_success(&run, "cargo run of the app with the added models");
    assert_eq!(stdout(&run), "[2, 10] [3, 2]\n");
}

#[test]
fn adding_refuses_a_taken_name_and_says_what_an_nn_module_needs() {
    let temp = tempfile::tempdir().unwrap();
    let app = temp.path().join("added");
    new_app(&app);
    let onnx = app.join("models/digits.onnx");
    assert_success(
        &add(&app, &["digits", onnx.to_str().unwrap()]),
        "the first add",
    );
    let before = std::fs::read_to_string(app.join("Cargo.toml")).unwrap();

    let again = add(&app, &["digits", onnx.to_str().unwrap()]);
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("already declares a model `digits`"),
        "{}",
        stderr(&again)
    );

    let python = app.join("models/linear.py");
    let no_entry = add(&app, &["linear", python.to_str().unwrap()]);
    assert!(
        stderr(&no_entry).contains("pass --entry ATTRIBUTE"),
        "{}",
        stderr(&no_entry)
    );
    let no_inputs = add(
        &app,
        &["linear", python.to_str().unwrap(), "--entry", "Linear"],
    );
    assert!(
        stderr(&no_inputs).contains("give each input as --input METHOD.ARGUMENT=SPEC"),
        "{}",
        stderr(&no_inputs)
    );
    assert_eq!(
        std::fs::read_to_string(app.join("Cargo.toml")).unwrap(),
        before,
        "failed adds change nothing"
    );
}
