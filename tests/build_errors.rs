//! Build errors name the model, the manifest key or file, and what to do.
//!
//! Errors of the manifest alone are unit tests of the parser (relax-build's
//! `metadata/tests.rs`). The fixtures under `fixtures/errors/` that need TVM are compiled
//! in-process with `relax_build::Config::try_compile`, as a build script would; a few
//! are built with `cargo build`, end to end.

use relax_cargo_tests::{assert_contains, cargo, compile_error, fixture, stderr};

/// `cargo build` of a fixture, which must fail; its stderr.
fn build_error(case: &str, env: &[(&str, &str)]) -> String {
    let output = cargo(&fixture("errors").join(case), &["build", "--quiet"], env);
    assert!(
        !output.status.success(),
        "the {case} fixture built, but it must fail"
    );
    stderr(&output)
}

#[test]
fn missing_entry_attribute() {
    assert_contains(
        &compile_error("missing-entry"),
        &[
            "model `linear` (`package.metadata.relax.models.linear.entry`)",
            "has no attribute `Lineer`; set `entry` to the attribute to compile",
            "attributes defined there: Linear",
        ],
    );
}

#[test]
fn nn_module_without_inputs() {
    assert_contains(
        &compile_error("inputs-missing"),
        &[
            "model `linear` (`package.metadata.relax.models.linear.inputs`)",
            "needs an input spec for each method to export; add e.g. [package.metadata.relax.models.linear.inputs.forward]",
        ],
    );
}

#[test]
fn nn_module_with_parameters_but_no_weights() {
    assert_contains(
        &compile_error("weights-missing"),
        &[
            "model `linear` (`package.metadata.relax.models.linear.weights`)",
            "missing: `Linear` takes 2 weight(s) (fc.weight, fc.bias); set weights = \"<file>.safetensors\"",
        ],
    );
}

#[test]
fn weights_of_the_wrong_shape() {
    assert_contains(
        &compile_error("weights-wrong-shape"),
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
        &compile_error("inputs-for-tvmscript"),
        &[
            "model `pair` (`package.metadata.relax.models.pair.inputs`)",
            "the entry is an IRModule, whose functions declare their own argument names, shapes and dtypes; remove `inputs`",
        ],
    );
}

#[test]
fn a_file_that_is_not_onnx() {
    assert_contains(
        &compile_error("onnx-not-onnx"),
        &[
            "model `classifier` (`package.metadata.relax.models.classifier.source`)",
            "classifier.onnx is not an ONNX model (DecodeError",
            "export the model again",
        ],
    );
}

/// Every unsupported operator in one error, with its count and first nodes.
#[test]
fn onnx_operators_tvm_does_not_support_all_in_one_error() {
    assert_contains(
        &compile_error("onnx-unsupported-op"),
        &[
            "model `determinant` (`package.metadata.relax.models.determinant.source`)",
            "ONNX importer has no converter for 2 operator type(s)",
            "Det x2 (node(s) det_node, det_batch)",
            "CenterCropPad x1 (node(s) crop_node)",
            "export the model without them",
        ],
    );
}

/// onnxruntime's contrib operators (domain `com.microsoft`) the driver does not convert
/// (its own Pad too, though ONNX has one of that name) are named as such, with the fix
/// (a QDQ export).
#[test]
fn onnxruntime_only_operators_are_named_with_the_fix() {
    assert_contains(
        &compile_error("onnx-contrib-op"),
        &[
            "model `fused` (`package.metadata.relax.models.fused.source`)",
            "Inverse x2 (node(s) inverse_1, inverse_2, an onnxruntime-only contrib operator)",
            "Pad x1 (node(s) pad, an onnxruntime-only contrib operator)",
            "exist only in onnxruntime",
            "QuantFormat.QDQ",
        ],
    );
}

/// A TopK whose k is computed from constants, with the preparation step off: TVM's
/// importer fails (it needs k as a constant, which the step folds), and the error says
/// to turn the step on.
#[test]
fn a_computed_k_without_the_preparation_step() {
    assert_contains(
        &compile_error("onnx-topk-unprepared"),
        &[
            "model `ranker` (`package.metadata.relax.models.ranker.source`)",
            "TVM's ONNX importer failed on node `top` (TopK): ValueError: TopK k must be a constant",
            "turn the ONNX preparation step back on",
        ],
    );
}

/// The same graph with its dims symbolic: the preparation step cannot fold the shapes,
/// and the error names the dims to pin.
#[test]
fn a_shape_subgraph_with_symbolic_dims_names_the_dims_to_pin() {
    assert_contains(
        &compile_error("onnx-shape-subgraph-symbolic"),
        &[
            "model `reshaper`",
            "node_prod cannot handle ShapeExpr inputs",
            "pin the symbolic dims of x (batch, seq) to numbers in the model's inputs.main",
            "[package.metadata.relax.models.reshaper]\n  inputs.main = { x = \"float32[<batch>, <seq>, 8]\" }",
        ],
    );
}

#[test]
fn an_input_spec_that_contradicts_the_graph() {
    assert_contains(
        &compile_error("onnx-contradiction"),
        &[
            "model `classifier` (`package.metadata.relax.models.classifier.inputs.main`)",
            "input `pixels` of ",
            "digits.onnx is float32 in the graph, but the manifest says int64; make the spec agree with the graph",
        ],
    );
}

/// A source that exits while imported used to leave only "reading .../library.so: No
/// such file".
#[test]
fn a_model_source_that_exits() {
    assert_contains(
        &compile_error("source-exit"),
        &[
            "model `quitter` (`package.metadata.relax.models.quitter.source`)",
            "quitter.py called sys.exit(0); a model source must not exit",
        ],
    );
}

#[test]
fn a_manifest_error_fails_cargo_build() {
    assert_contains(
        &build_error("unknown-key", &[]),
        &[
            "`package.metadata.relax.models.linear.input`: unknown field `input`",
            "did you mean `inputs`?",
        ],
    );
}

#[test]
fn python_exception_shows_a_traceback_trimmed_to_the_model_source() {
    let stderr = build_error("python-exception", &[]);
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
    for trimmed in ["main.py", "relax_driver", "importlib"] {
        assert!(
            !stderr.contains(trimmed),
            "the driver's frames ({trimmed}) must be trimmed:\n{stderr}"
        );
    }
}

#[test]
fn an_unusable_relax_python_is_the_error_not_skipped() {
    assert_contains(
        &build_error("toolchain-unusable", &[("RELAX_PYTHON", "/nonexistent/python3")]),
        &[
            "model `linear`: there is no prepared artifact in ",
            "RELAX_PYTHON=/nonexistent/python3 cannot be used: /nonexistent/python3 does not exist",
            "Fix: point RELAX_PYTHON at a Python with TVM (`python -m pip install apache-tvm==0.27.0.post1 apache-tvm-ffi==0.1.14.post1`)",
            "Or: run `cargo relax prepare --manifest-path ",
        ],
    );
}

#[test]
fn include_model_without_a_build_script_names_the_fix() {
    let stderr = build_error("no-build-script", &[]);
    assert_contains(
        &stderr,
        &[
            "relax_runtime::include_model!(\"linear\"): this crate has no build script output (OUT_DIR is not set)",
            "a build.rs with `fn main() { relax_build::compile_models(); }`",
        ],
    );
    assert!(
        !stderr.contains("environment variable `OUT_DIR` not defined"),
        "{stderr}"
    );
}

#[test]
fn a_misspelled_model_name_lists_the_declared_models() {
    let stderr = build_error("misspelled-model", &[]);
    assert_contains(
        &stderr,
        &["no model `linaer` in [package.metadata.relax.models] of this package; declared: linear"],
    );
    assert!(!stderr.contains("couldn't read"), "{stderr}");
}
