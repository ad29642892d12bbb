//! Each fixture under `fixtures/errors/` fails `cargo build` with a message that names
//! the model, the manifest key or file, and what to do.

use relax_cargo_tests::{cargo, fixture};

fn build_error(case: &str) -> String {
    let output = cargo(&fixture("errors").join(case), &["build", "--quiet"], &[]);
    assert!(
        !output.status.success(),
        "the {case} fixture built, but it must fail"
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn assert_contains(stderr: &str, expected: &[&str]) {
    for part in expected {
        assert!(
            stderr.contains(part),
            "expected {part:?} in the build error:\n{stderr}"
        );
    }
}

#[test]
fn missing_source() {
    assert_contains(
        &build_error("missing-source"),
        &["`package.metadata.relax.models.linear.source`: missing: set it to the model's source file"],
    );
}

#[test]
fn unknown_key() {
    assert_contains(
        &build_error("unknown-key"),
        &[
            "`package.metadata.relax.models.linear.input`: unknown field `input`",
            "did you mean `inputs`?",
        ],
    );
}

#[test]
fn bad_dtype() {
    assert_contains(
        &build_error("bad-dtype"),
        &[
            "`package.metadata.relax.models.linear.inputs.forward.x`",
            "found \"flaot32[1, 4]\": unknown dtype `flaot32`; use one of float16, float32",
        ],
    );
}

#[test]
fn source_file_absent() {
    assert_contains(
        &build_error("source-absent"),
        &["`package.metadata.relax.models.linear.source`: file `models/linear.py` not found"],
    );
}

#[test]
fn missing_entry_attribute() {
    assert_contains(
        &build_error("missing-entry"),
        &[
            "model `linear` (`package.metadata.relax.models.linear.entry`)",
            "has no attribute `Lineer`; set `entry` to the attribute to compile",
            "attributes defined there: Linear",
        ],
    );
}

#[test]
fn python_exception_shows_a_traceback_trimmed_to_the_model_source() {
    let stderr = build_error("python-exception");
    assert_contains(
        &stderr,
        &[
            "model `broken` (`package.metadata.relax.models.broken.source`)",
            "raised ZeroDivisionError: integer division or modulo by zero",
            "Traceback (most recent call last, trimmed to the model source):",
            "broken.py\", line 7, in hidden_size",
            "return features // 0",
        ],
    );
    assert!(
        !stderr.contains("driver.py"),
        "the driver's frames must be trimmed:\n{stderr}"
    );
    assert!(
        !stderr.contains("importlib"),
        "importlib's frames must be trimmed:\n{stderr}"
    );
}

#[test]
fn nn_module_without_inputs() {
    assert_contains(
        &build_error("inputs-missing"),
        &[
            "model `linear` (`package.metadata.relax.models.linear.inputs`)",
            "needs an input spec for each method to export; add e.g. [package.metadata.relax.models.linear.inputs.forward]",
        ],
    );
}

#[test]
fn nn_module_with_parameters_but_no_weights() {
    assert_contains(
        &build_error("weights-missing"),
        &[
            "model `linear` (`package.metadata.relax.models.linear.weights`)",
            "missing: `Linear` takes 2 weight(s) (fc.weight, fc.bias); set weights = \"<file>.safetensors\"",
        ],
    );
}

#[test]
fn weights_of_the_wrong_shape() {
    assert_contains(
        &build_error("weights-wrong-shape"),
        &[
            "model `linear` (`package.metadata.relax.models.linear.weights`)",
            "tensor `fc.weight` in ",
            "linear.safetensors is float32[3, 4], but the model expects float32[2, 4]",
        ],
    );
}

#[test]
fn inputs_given_for_a_tvmscript_module() {
    assert_contains(
        &build_error("inputs-for-tvmscript"),
        &[
            "model `pair` (`package.metadata.relax.models.pair.inputs`)",
            "the entry is an IRModule, whose functions declare their own argument names, shapes and dtypes; remove `inputs`",
        ],
    );
}

#[test]
fn an_unusable_relax_python_is_the_error_not_skipped() {
    let output = cargo(
        &fixture("errors").join("toolchain-unusable"),
        &["build", "--quiet"],
        &[("RELAX_PYTHON", "/nonexistent/python3")],
    );
    assert!(
        !output.status.success(),
        "a build with an unusable RELAX_PYTHON must fail"
    );
    assert_contains(
        &String::from_utf8_lossy(&output.stderr),
        &[
            "model `linear`: there is no prepared artifact in ",
            "RELAX_PYTHON=/nonexistent/python3 cannot be used: /nonexistent/python3 does not exist",
            "Fix: point RELAX_PYTHON at a Python with TVM (`python -m pip install apache-tvm==0.27.0.post1 apache-tvm-ffi==0.1.14.post1`)",
            "Or: run `cargo relax prepare --manifest-path ",
        ],
    );
}

#[test]
fn a_file_that_is_not_onnx() {
    assert_contains(
        &build_error("onnx-not-onnx"),
        &[
            "model `classifier` (`package.metadata.relax.models.classifier.source`)",
            "classifier.onnx is not an ONNX model (DecodeError",
            "export the model again",
        ],
    );
}

#[test]
fn an_onnx_operator_tvm_does_not_support() {
    assert_contains(
        &build_error("onnx-unsupported-op"),
        &[
            "model `determinant` (`package.metadata.relax.models.determinant.source`)",
            "TVM's ONNX importer does not support operator(s) Det (node(s) det_node)",
        ],
    );
}

#[test]
fn an_input_spec_that_contradicts_the_graph() {
    assert_contains(
        &build_error("onnx-contradiction"),
        &[
            "model `classifier` (`package.metadata.relax.models.classifier.inputs.main`)",
            "input `pixels` of ",
            "digits.onnx is float32 in the graph, but the manifest says int64; make the spec agree with the graph",
        ],
    );
}

#[test]
fn an_entry_for_an_onnx_model() {
    assert_contains(
        &build_error("onnx-entry"),
        &["`package.metadata.relax.models.classifier.entry`: an ONNX model has no entry to choose"],
    );
}
