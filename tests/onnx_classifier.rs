//! The onnx-classifier example (an ONNX file compiled at build time, initializers both
//! embedded and external) matches onnxruntime on the same digits.

use relax_cargo_tests::{
    assert_success, assert_tensors_close, run_release, test_python, workspace_root,
};
use serde_json::Value;

#[test]
fn onnx_classifier_matches_onnxruntime() {
    let output = run_release("onnx-classifier", &["--json", "48"]);
    let ours: Value = serde_json::from_slice(&output.stdout).unwrap();

    let script = workspace_root().join("examples/onnx-classifier/reference.py");
    let reference = std::process::Command::new(test_python())
        .arg(script)
        .arg("48")
        .output()
        .unwrap();
    assert_success(&reference, "onnxruntime reference");
    let reference: Value = serde_json::from_slice(&reference.stdout).unwrap();

    assert_eq!(ours["logits"]["shape"], serde_json::json!([48, 10]));
    // rtol/atol 1e-5 relative to 1 + |reference|: float32 matmuls in another order.
    assert_tensors_close("logits", &ours["logits"], &reference["logits"], 1e-5);
    assert_tensors_close(
        "probabilities",
        &ours["probabilities"],
        &reference["probabilities"],
        1e-5,
    );
}

#[test]
fn onnx_classifier_prints_accuracy() {
    let output = run_release("onnx-classifier", &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.starts_with("accuracy: 0.9722 (350/360 held-out digits"),
        "{stdout}"
    );
}
