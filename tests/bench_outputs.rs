//! Every relax-bench model (default and tuned builds, kernels included, and the PyTorch
//! model's ONNX export compiled too) gives onnxruntime's outputs on the same inputs,
//! within 1e-4 relative to 1 + |expected| (the bf16 builds and the QDQ int8 ResNet-50
//! within 5e-2 of the largest value, top-1 the same); so does OpenVINO in float32 on the
//! rows measured against it.

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
        "mobilenet_v2",
        "efficientnet_b0",
        "mobilenet_v3",
        "ocr_det",
        "torch_cnn",
    ] {
        assert!(
            checked.iter().any(|line| {
                let mut words = line.split_whitespace().skip(1);
                (words.next(), words.next()) == (Some(model), Some("default"))
            }),
            "{model} was checked: {report}"
        );
    }
    // The bf16 builds and the int8 model, against onnxruntime and against the same model
    // in float32 (the classifiers' top-1 too).
    for (model, top1) in [
        ("minilm_s128_bf16", ""),
        ("resnet50_bf16", ", top-1 agrees"),
        ("mobilenet_v2_bf16", ", top-1 agrees"),
        ("ocr_det_bf16", ""),
        ("resnet50_int8", ", top-1 agrees"),
    ] {
        for against in [
            format!("(reduced precision: relative to the largest value; bound 5e-2{top1})"),
            format!("(against our float32 build; bound 5e-2{top1})"),
        ] {
            assert!(
                checked.iter().any(|line| {
                    line.split_whitespace().nth(1) == Some(model) && line.ends_with(&against)
                }),
                "{model} was checked {against}: {report}"
            );
        }
    }
    // The second reference runs too, and agrees with the first in float32.
    for model in ["resnet50", "mobilenet_v2", "ocr_det", "minilm_s128"] {
        assert!(
            checked.iter().any(|line| {
                line.split_whitespace().nth(1) == Some(model)
                    && line.ends_with("(OpenVINO f32 against onnxruntime)")
            }),
            "{model} was checked in OpenVINO f32: {report}"
        );
    }
    assert!(
        checked.iter().any(|line| {
            let mut words = line.split_whitespace().skip(1);
            (words.next(), words.next()) == (Some("torch_cnn"), Some("onnx"))
        }),
        "torch_cnn's ONNX export was checked: {report}"
    );
    assert!(!report.contains("FAIL"), "{report}");
    assert!(
        report.ends_with(
            "every output is within 1e-4 of onnxruntime (5e-2 for bf16 and int8 builds)\n"
        ),
        "{report}"
    );
}

/// `--only` names models of the bench; a name that is not one, or no names, is an error
/// that says which.
#[test]
fn only_refuses_names_that_are_not_models_of_the_bench() {
    let run = |args: &[&str]| {
        let mut all = vec!["run", "--quiet", "--release", "-p", "relax-bench", "--"];
        all.extend_from_slice(args);
        relax_cargo_tests::cargo(relax_cargo_tests::workspace_root(), &all, &[])
    };
    let unknown = run(&["--check", "--only", "resnet50,resnet51"]);
    assert!(!unknown.status.success());
    let message = relax_cargo_tests::stderr(&unknown);
    assert!(
        message.contains("`resnet51` is not a model of the bench (they are: mlp_b1, ")
            && message.contains("squeezenet"),
        "{message}"
    );
    let empty = run(&["--check", "--only"]);
    assert!(!empty.status.success());
    let message = relax_cargo_tests::stderr(&empty);
    assert!(
        message.contains("--only needs model names, comma-separated"),
        "{message}"
    );
}
