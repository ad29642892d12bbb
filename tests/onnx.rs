//! ONNX sources: per-model options and pinned dims, the conformance runner over ONNX's
//! own backend-test cases against the committed pass lists and TVM's own path, and
//! models shaped like real exports against onnxruntime.

use std::collections::BTreeSet;
use std::path::PathBuf;

use relax_cargo_tests::{
    assert_success, conformance, python, run_fixture, test_python, toolchain_python, workspace_root,
};

#[test]
fn pinned_and_renamed_dims_and_per_model_options() {
    let output = run_fixture("onnx-options", &[]);
    let lines: Vec<&str> = output.lines().collect();
    assert!(lines[0].starts_with("pinned target: {"), "{output}");
    assert!(
        lines[0].contains(r#""mcpu":"x86-64-v2""#),
        "the model's target keys are merged in: {output}"
    );
    assert_eq!(
        lines[1..],
        [
            "pinned: [Static(4), Static(64)]",
            "renamed: [Symbolic(\"n\"), Static(64)]",
            "first four rows agree: true",
            "model `pinned`, function `main`, argument `pixels`: expected shape [4, 64], found [5, 64]",
        ]
    );
}

fn onnx_test_data() -> PathBuf {
    let script = "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'backend', 'test', 'data'))";
    let output = std::process::Command::new(toolchain_python())
        .args(["-c", script])
        .output()
        .unwrap();
    assert_success(&output, "locating onnx's backend test data");
    PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
}

fn cases(output: &str, prefixes: &[&str]) -> BTreeSet<String> {
    output
        .lines()
        .filter_map(|line| {
            let (word, rest) = line.split_once(' ')?;
            prefixes
                .contains(&word)
                .then(|| rest.split(':').next().unwrap().to_string())
        })
        .collect()
}

#[test]
fn conformance_runner_keeps_the_pass_list_and_fails_only_where_tvm_does() {
    let data = onnx_test_data();
    let dirs = [data.join("pytorch-operator"), data.join("simple")];
    let expected = workspace_root().join("relax-conformance/expected-pass.txt");
    let mut args = vec!["--jobs", "2", "--expect", expected.to_str().unwrap()];
    args.extend(dirs.iter().map(|dir| dir.to_str().unwrap()));
    let output = conformance(&args);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_success(&output, "relax-conformance --expect");

    let passed = cases(&stdout, &["PASS"]);
    let listed: BTreeSet<String> = std::fs::read_to_string(&expected)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert!(passed.is_superset(&listed), "every listed case passes");
    assert!(
        passed.len() >= 42,
        "at least TVM's own 42 of 58 pass: {stdout}"
    );
    let total_line = stdout
        .lines()
        .rev()
        .find(|line| line.ends_with(" failed"))
        .unwrap();
    let failed_count: usize = total_line.split(' ').nth(2).unwrap().parse().unwrap();
    assert_eq!(passed.len() + failed_count, 58, "{total_line}");
    assert!(
        stdout.contains("failing only with the ONNX preparation step (0): none"),
        "the preparation step loses no case: {stdout}"
    );

    let ours_failed = cases(&stdout, &["FAIL", "UNSUPPORTED"]);
    let reference = python(
        &workspace_root().join("relax-conformance/tvm_reference.py"),
        &dirs
            .iter()
            .map(|dir| dir.to_str().unwrap())
            .collect::<Vec<_>>(),
    );
    let tvm_failed = cases(&reference, &["FAIL"]);
    assert!(
        ours_failed.is_subset(&tvm_failed),
        "cases that fail here but pass through TVM's own Python path: {:?}",
        ours_failed.difference(&tvm_failed).collect::<Vec<_>>()
    );
}

/// A graph that computes a reshape target at run time (which TVM's importer alone
/// rejects) imports after the preparation step folds it with the pinned dims, and
/// matches onnxruntime; so does a ReLU6 whose 0-d bounds are external weights.
#[test]
fn a_shape_subgraph_imports_with_pinned_dims_and_matches_onnxruntime() {
    let ours: serde_json::Value = serde_json::from_str(&run_fixture("onnx-prepare", &[])).unwrap();
    let script = relax_cargo_tests::fixture("onnx-prepare").join("reference.py");
    let reference = std::process::Command::new(relax_cargo_tests::test_python())
        .arg(script)
        .output()
        .unwrap();
    relax_cargo_tests::assert_success(&reference, "onnxruntime reference");
    let reference: serde_json::Value = serde_json::from_slice(&reference.stdout).unwrap();
    assert_eq!(ours["y"]["shape"], serde_json::json!([2, 12, 3]));
    relax_cargo_tests::assert_tensors_close("y", &ours["y"], &reference["y"], 1e-6);
    // ReLU6 with 0-d bounds kept as external weights (MobileNet's exports).
    let clipped = ours["clipped"]["data"].as_array().unwrap();
    assert!(
        clipped.iter().any(|value| value.as_f64() == Some(6.0)),
        "{clipped:?}"
    );
    assert!(
        clipped.iter().any(|value| value.as_f64() == Some(0.0)),
        "{clipped:?}"
    );
    relax_cargo_tests::assert_tensors_close(
        "clipped",
        &ours["clipped"],
        &reference["clipped"],
        1e-6,
    );
}

/// Every 2-D convolution and pooling of onnx's `pytorch-converted/` cases, against the
/// outputs the cases ship: the convolutions through relax-runtime's kernels (depthwise
/// ones with and without a multiplier, strided and padded; grouped, dilated, strided,
/// without bias), the pools (with padding and dilation, counting the padding or not)
/// through TVM's loops with the default schedules.
#[test]
fn every_pytorch_converted_conv2d_and_pool2d_case_passes() {
    let source = onnx_test_data().join("pytorch-converted");
    let folder = tempfile::tempdir().unwrap();
    let mut linked = Vec::new();
    for entry in std::fs::read_dir(&source).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let two_d = ["test_Conv2d", "test_MaxPool2d", "test_AvgPool2d"];
        if two_d.iter().any(|prefix| name.starts_with(prefix)) {
            std::os::unix::fs::symlink(source.join(&name), folder.path().join(&name)).unwrap();
            linked.push(name);
        }
    }
    let count = |part: &str| linked.iter().filter(|name| name.contains(part)).count();
    assert!(
        count("depthwise") >= 4 && count("Pool2d") >= 4 && linked.len() >= 14,
        "onnx ships the convolution and pooling cases: {linked:?}"
    );
    let output = conformance(&[folder.path().to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_success(
        &output,
        "relax-conformance on pytorch-converted's Conv2d and Pool2d cases",
    );
    assert_eq!(
        cases(&stdout, &["PASS"]).len(),
        linked.len(),
        "every case passes: {stdout}"
    );
}

/// Runs a script of relax-conformance's with the tests' Python (onnx, onnxruntime) to
/// write cases into a fresh `target/<folder>`, which it returns.
fn written_cases(script: &str, folder: &str, args: &[&str]) -> PathBuf {
    let dir = workspace_root().join("target").join(folder);
    let _ = std::fs::remove_dir_all(&dir);
    let output = std::process::Command::new(test_python())
        .arg(workspace_root().join("relax-conformance").join(script))
        .arg(&dir)
        .args(args)
        .output()
        .unwrap();
    assert_success(&output, script);
    dir
}

/// relax-conformance/real_models.py: a CRNN (conv stack, two bidirectional LSTMs,
/// linear) and a GRU with `sequence_lens`, their time dims symbolic; an `If` on an input
/// scalar; a BERT-style attention whose mask is expanded through `Shape` and `Equal`; a
/// MobileNetV3-style detector head (Resize, ConvTranspose, a reshape target from `Shape`)
/// with every dim symbolic. Each is compiled once and run at two or three sizes, within
/// 1e-4 of onnxruntime, and none needs the preparation step turned off. The QDQ int8 CNN
/// is compared within 1e-3 (real_models.py says why); the integer dense layer's int32
/// sums exactly.
#[test]
fn models_shaped_like_real_exports_match_onnxruntime_at_several_sizes() {
    let float_models = [
        "bert_mask",
        "crnn",
        "detector_head",
        "gru_speech",
        "if_scalar",
    ];
    for (models, tolerance, folder) in [
        (&float_models[..], "1e-4", "real-models"),
        (
            &["qdq_cnn", "integer_dense"][..],
            "1e-3",
            "real-models-quantized",
        ),
    ] {
        let dir = written_cases("real_models.py", folder, models);
        let output = conformance(&[
            "--jobs",
            "2",
            "--tolerance",
            tolerance,
            dir.to_str().unwrap(),
        ]);
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert_success(&output, "relax-conformance on real_models.py's models");
        for model in models {
            assert!(stdout.contains(&format!("PASS {model}\n")), "{stdout}");
        }
        assert!(
            stdout.contains("failing only with the ONNX preparation step (0): none"),
            "{stdout}"
        );
    }
}

/// The families of ONNX's generated node tests that the driver's own converters serve
/// (recurrent layers through relax-runtime's kernel, control flow, quantized operators,
/// Resize, Attention, the normalizations, BitShift, Dropout, Trilu), that relax-runtime's
/// `relax.run.nonzero` and `relax.run.unique` run (NonZero, Compress, Unique, and the
/// Squeeze, Unsqueeze, Tile, Range and Expand whose shapes come from values), or that
/// once failed here but not through TVM's own Python path (cosh, sinh, optional inputs,
/// float8_e8m0), written by relax-conformance/node_suite.py. Each case is a build of a
/// few seconds, so CI runs these of the 1,884, and of the largest families (Attention,
/// Resize, the normalizations, BitShift) some variants of each;
/// `node-expected-pass.txt` lists their passing cases, and docs/onnx.md has the whole
/// suite's command, which runs them all.
const NODE_FAMILIES: &[&str] = &[
    "test_lstm_",
    "test_gru_",
    "test_rnn_",
    "test_simple_rnn_",
    "test_scan",
    "test_convinteger_",
    "test_matmulinteger",
    "test_qlinearconv",
    "test_qlinearmatmul_",
    "test_if",
    "test_loop11",
    "test_resize_upsample_scales",
    "test_resize_downsample_sizes",
    "test_resize_tf_crop",
    "test_attention_3d_gqa",
    "test_attention_4d_causal",
    "test_attention_4d_with_past_and_present",
    "test_attention_local_window_ext_cache",
    "test_rms_normalization_3d_",
    "test_rotary_embedding",
    "test_layer_normalization_3d_",
    "test_bitshift_right_int8",
    "test_bitshift_left_uint",
    "test_dropout",
    "test_training_dropout",
    "test_tril",
    "test_triu",
    "test_nonzero",
    "test_compress_",
    "test_unique_",
    "test_squeeze",
    "test_unsqueeze",
    "test_tile",
    "test_range_",
    "test_expand_",
    "test_cosh",
    "test_sinh",
    "test_optional_",
    "test_cast_e8m0_",
];

#[test]
fn the_node_suites_converter_families_keep_their_pass_list() {
    let dir = written_cases("node_suite.py", "node-suite-families", NODE_FAMILIES);
    let expected = workspace_root().join("relax-conformance/node-expected-pass.txt");
    let output = conformance(&[
        "--jobs",
        "2",
        "--expect",
        expected.to_str().unwrap(),
        dir.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_success(
        &output,
        "relax-conformance --expect over the node suite's families",
    );
    let passed = cases(&stdout, &["PASS"]);
    let listed: BTreeSet<String> = std::fs::read_to_string(&expected)
        .unwrap()
        .lines()
        .filter(|name| NODE_FAMILIES.iter().any(|family| name.starts_with(family)))
        .map(str::to_string)
        .collect();
    assert!(!listed.is_empty(), "the pass list has these families");
    assert!(passed.is_superset(&listed), "{stdout}");
    assert!(
        stdout.contains("failing only with the ONNX preparation step (0): none"),
        "{stdout}"
    );
}

/// The node suite's pass list (the whole suite's run, docs/onnx.md) holds every case
/// that TVM's own Python path passes (`tvm_reference.py` over the same suite,
/// `node-tvm-reference-pass.txt`): none passes there and fails here.
#[test]
fn the_node_suites_pass_list_holds_every_case_tvm_s_own_path_passes() {
    let read = |name: &str| -> BTreeSet<String> {
        std::fs::read_to_string(workspace_root().join("relax-conformance").join(name))
            .unwrap()
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(str::to_string)
            .collect()
    };
    let here = read("node-expected-pass.txt");
    let tvm = read("node-tvm-reference-pass.txt");
    assert!(
        tvm.len() > 700 && here.len() >= 1_100,
        "{} {}",
        tvm.len(),
        here.len()
    );
    let missing: Vec<&String> = tvm.difference(&here).collect();
    assert!(
        missing.is_empty(),
        "TVM's path passes these, relax-conformance does not: {missing:?}"
    );
}
