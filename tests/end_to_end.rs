//! The fixture apps, built with real TVM and run; their outputs are compared with numpy.

use relax_cargo_tests::{assert_tensors_close, fixture, json_file, python, run_fixture};
use serde_json::{json, Value};

/// Deterministic values in [-2, 2) without a random crate.
fn values(count: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

fn compare(fixture_name: &str, inputs: &Value, outputs: &[&str]) {
    let inputs = json_file(inputs);
    let path = inputs.path().to_str().unwrap();
    let actual: Value = serde_json::from_str(&run_fixture(fixture_name, &[path])).unwrap();
    let reference: Value = serde_json::from_str(&python(
        &fixture(fixture_name).join("reference.py"),
        &[path],
    ))
    .unwrap();
    for output in outputs {
        assert_tensors_close(output, &actual[output], &reference[output], 1e-5);
    }
}

#[test]
fn nn_module_with_weights_matches_numpy_at_two_batch_sizes() {
    for batch in [1, 7] {
        let inputs = json!({"x": {"shape": [batch, 8], "data": values(batch * 8, batch as u64)}});
        compare("nn-mlp", &inputs, &["forward", "embed"]);
    }
}

#[test]
fn tvmscript_module_with_tuple_output_matches_numpy() {
    let inputs = json!({
        "a": {"shape": [5, 4], "data": values(20, 1)},
        "b": {"shape": [5, 4], "data": values(20, 2)},
        "x": {"shape": [2, 3], "data": values(6, 3)},
    });
    compare("tvmscript-pair", &inputs, &["total", "product", "scaled"]);
}

#[test]
fn shape_and_dtype_mismatches_are_caught_before_the_call() {
    let messages = run_fixture("nn-mlp", &["errors"]);
    assert_eq!(
        messages.lines().collect::<Vec<_>>(),
        [
            "model `tiny_mlp`, function `forward`, argument `x`: expected shape [batch, 8], found [2, 7]",
            "model `tiny_mlp`, function `embed`, argument `x`: expected dtype float32, found float64",
        ]
    );
    let messages = run_fixture("tvmscript-pair", &["errors"]);
    assert_eq!(
        messages.lines().collect::<Vec<_>>(),
        [
            "model `pair`, function `split_sum`, argument `b`: expected shape [n, 4], found [3, 5]",
            "model `pair`, function `scale`, argument `x`: expected dtype float32, found int32",
        ]
    );
}

#[test]
fn every_supported_dtype_a_scalar_and_a_zero_size_dim_match_numpy() {
    let ours = run_fixture("dtypes", &[]);
    let reference = python(&fixture("dtypes").join("reference.py"), &[]);
    assert_eq!(ours.lines().count(), 8, "{ours}");
    assert_eq!(ours, reference);
}

/// Functions named like Rust keywords (`crate`, `super`, `self`) or like the generated
/// Model's old field (`vm`) become methods (`crate_`, `super_`, `self_`, `vm`).
#[test]
fn functions_named_like_keywords_become_methods() {
    assert_eq!(
        run_fixture("tvmscript-pair", &["names"]),
        "vm: [6.0, 8.0]\ncrate: [9.0, 16.0]\nsuper: [0.0, 0.0]\nself: [3.0, 4.0]\n"
    );
}
