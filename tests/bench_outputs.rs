//! Every relax-bench model (default and tuned builds, kernels included) gives
//! onnxruntime's outputs on the same inputs, within 1e-4 relative to 1 + |expected|.

use relax_cargo_tests::{run_release, stdout};

#[test]
fn every_benchmark_model_matches_onnxruntime() {
    let output = run_release("relax-bench", &["--check"]);
    let report = stdout(&output);
    let checked: Vec<&str> = report
        .lines()
        .filter(|line| line.starts_with("ok "))
        .collect();
    for model in [
        "mlp_b1",
        "mlp_b64",
        "matmul",
        "cnn",
        "add",
        "minilm_s16",
        "minilm_s128",
        "minilm_b8_s128",
        "resnet50",
        "densenet121",
        "inception_v1",
        "inception_v2",
        "shufflenet",
        "squeezenet",
    ] {
        assert!(
            checked
                .iter()
                .any(|line| line.split_whitespace().nth(1) == Some(model)),
            "{model} was checked: {report}"
        );
    }
    assert!(!report.contains("FAIL"), "{report}");
    assert!(
        report.ends_with("every output is within 1e-4 of onnxruntime\n"),
        "{report}"
    );
}
