//! PyTorch sources (a `.py` torch module with safetensors weights, one returned by a
//! function, a `.pt2` program) built with real TVM and compared with eager PyTorch, run
//! in the toolchain's Python; their build errors; and the torch-digits example, native
//! and for aarch64 under qemu.

use std::path::PathBuf;

use relax_cargo_tests::{
    assert_contains, assert_success, assert_tensors_close, cargo, cargo_relax, compile_error,
    fixture, json_file, python_with_torch, run_fixture, run_under_qemu, stdout, workspace_root,
    CROSS_TARGET,
};
use serde_json::{json, Value};

/// Deterministic values in [-1, 1).
fn values(count: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_add(1);
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn tensor(shape: &[usize], seed: u64) -> Value {
    json!({"shape": shape, "data": values(shape.iter().product(), seed)})
}

#[test]
fn torch_modules_and_a_program_match_eager_pytorch_at_two_sizes() {
    // (batch, sequence): symbolic dims of the cnn and encoder (batch) and the encoder
    // (sequence), and the program's batch, each run at two sizes from one library.
    for (batch, sequence) in [(1, 3), (4, 9)] {
        let inputs = json!({
            "image": tensor(&[batch, 1, 12, 12], 1),
            "tokens": tensor(&[batch, sequence, 32], 2),
            "features": tensor(&[batch + 2, 6], 3),
        });
        let inputs = json_file(&inputs);
        let path = inputs.path().to_str().unwrap();
        let ours: Value = serde_json::from_str(&run_fixture("torch-models", &[path])).unwrap();
        let reference: Value = serde_json::from_str(&python_with_torch(
            &fixture("torch-models").join("reference.py"),
            &[path],
        ))
        .unwrap();
        for model in ["cnn", "encoder", "program"] {
            assert_tensors_close(model, &ours[model], &reference[model], 1e-5);
        }
    }
}

#[test]
fn a_weights_file_that_does_not_match_the_state_dict_lists_the_keys() {
    assert_contains(
        &compile_error("torch-weights-keys"),
        &[
            "model `cnn` (`package.metadata.relax.models.cnn.weights`)",
            "wrong_keys.safetensors does not match the module's state dict",
            "missing key(s) fc.bias; unexpected key(s) fc.scale",
            "save the module's state_dict() with safetensors",
        ],
    );
}

#[test]
fn a_failed_export_names_the_inputs_key_and_what_torch_said() {
    assert_contains(
        &compile_error("torch-export-fails"),
        &[
            "model `branchy` (`package.metadata.relax.models.branchy.inputs`)",
            "exporting `Branchy` with these inputs failed: torch.export failed:",
            "data-dependent",
            "Fix: where torch specialized a dim",
            "batch are symbolic",
        ],
    );
}

#[test]
fn argument_names_other_than_forwards_are_refused_on_the_inputs_key() {
    assert_contains(
        &compile_error("torch-input-names"),
        &[
            "model `cnn` (`package.metadata.relax.models.cnn.inputs.forward`)",
            "are (image), but the manifest declares (picture)",
            "name the arguments as `forward` does",
        ],
    );
}

#[test]
fn a_truncated_program_file_is_refused_on_the_source_key() {
    assert_contains(
        &compile_error("torch-not-a-program"),
        &[
            "model `program` (`package.metadata.relax.models.program.source`)",
            "truncated.pt2 is not a torch.export program",
            "save the program again with torch.export.save",
        ],
    );
}

#[test]
fn every_unsupported_aten_operator_is_named_in_one_error() {
    assert_contains(
        &compile_error("torch-unsupported-ops"),
        &[
            "model `spectral`",
            "PyTorch importer has no converter for 2 aten operator(s)",
            "_fft_r2c.default (2x, in ",
            "cummax.default (1x, in ",
        ],
    );
}

fn example() -> PathBuf {
    workspace_root().join("examples").join("torch-digits")
}

/// `cargo run --release` of the torch-digits example with `args`; its stdout.
fn run_example(args: &[&str]) -> String {
    let mut all = vec!["run", "--quiet", "--release", "--"];
    all.extend_from_slice(args);
    let output = cargo(&example(), &all, &[]);
    assert_success(&output, "cargo run of the torch-digits example");
    stdout(&output)
}

#[test]
fn the_torch_example_matches_eager_pytorch_and_prints_its_accuracy() {
    let ours: Value = serde_json::from_str(&run_example(&["--json", "48"])).unwrap();
    let reference: Value =
        serde_json::from_str(&python_with_torch(&example().join("reference.py"), &["48"])).unwrap();
    assert_tensors_close("probabilities", &ours, &reference, 1e-5);
    let printed = run_example(&[]);
    assert!(
        printed.contains("digit 0: label 6, predicted 6")
            && printed.ends_with("accuracy: 0.9944 (358/360 held-out digits)\n"),
        "{printed}"
    );
}

#[test]
fn the_torch_example_for_aarch64_prints_the_native_probabilities() {
    let manifest = example().join("Cargo.toml");
    let manifest = manifest.to_str().unwrap();
    let build = cargo(
        &example(),
        &["build", "--quiet", "--release", "--target", CROSS_TARGET],
        &[],
    );
    assert_success(&build, "cross build of the torch-digits example");
    let out = tempfile::tempdir().unwrap();
    let bundled = cargo_relax(
        &[
            "bundle",
            "--release",
            "--target",
            CROSS_TARGET,
            "--manifest-path",
            manifest,
            "--out",
            out.path().to_str().unwrap(),
        ],
        &[],
    );
    assert_success(&bundled, "cargo relax bundle of the torch-digits example");
    let executable = out
        .path()
        .join(format!("torch-digits-{CROSS_TARGET}"))
        .join("torch-digits");
    let emulated = run_under_qemu(&executable, &["--json", "48"], out.path());
    assert_success(&emulated, "the aarch64 torch-digits example under qemu");
    let emulated: Value = serde_json::from_str(&stdout(&emulated)).unwrap();
    let native: Value = serde_json::from_str(&run_example(&["--json", "48"])).unwrap();
    assert_tensors_close("probabilities", &emulated, &native, 1e-5);
}
