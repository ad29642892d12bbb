use relax_runtime::signature::WeightLayout;

use super::*;

fn input(shape: Vec<Dim>) -> TensorSignature {
    TensorSignature {
        name: "x".to_string(),
        dtype: DType::F32,
        shape,
        layout: WeightLayout::Stored,
        columns: None,
        depth: None,
    }
}

#[test]
fn symbolic_dims_come_from_the_request_or_are_one() {
    let x = input(vec![
        Dim::Symbolic("batch".to_string()),
        Dim::Static(3),
        Dim::Symbolic("width".to_string()),
    ]);
    let dims = BTreeMap::from([("width".to_string(), 128)]);
    assert_eq!(concrete_shape(&x, &dims, "main").unwrap(), [1, 3, 128]);
}

#[test]
fn computed_and_negative_dims_are_refused_with_the_input_named() {
    let computed = input(vec![Dim::Expression("n * 2".to_string())]);
    let error = concrete_shape(&computed, &BTreeMap::new(), "main").unwrap_err();
    assert!(
        error.contains("input `x` of `main`") && error.contains("n * 2"),
        "{error}"
    );
    let negative = input(vec![Dim::Symbolic("n".to_string())]);
    let dims = BTreeMap::from([("n".to_string(), -1)]);
    assert!(concrete_shape(&negative, &dims, "main")
        .unwrap_err()
        .contains("negative"));
}

#[test]
fn sample_inputs_are_reproducible_in_range_and_bounded_in_size() {
    let float = sample_tensor(DType::F32, &[2, 5]).unwrap();
    let values = float.as_slice::<f32>().unwrap().to_vec();
    assert!(
        values.iter().all(|value| (0.0..1.0).contains(value)),
        "{values:?}"
    );
    let again = sample_tensor(DType::F32, &[2, 5]).unwrap();
    assert_eq!(again.as_slice::<f32>().unwrap(), values.as_slice());
    let ids = sample_tensor(DType::I64, &[64]).unwrap();
    assert!(ids
        .as_slice::<i64>()
        .unwrap()
        .iter()
        .all(|id| *id == 0 || *id == 1));
    let error = sample_tensor(DType::F32, &[1 << 20, 1 << 20]).unwrap_err();
    assert!(error.contains("choose smaller dims"), "{error}");
    let overflow = sample_tensor(DType::F32, &[usize::MAX, 2]).unwrap_err();
    assert!(overflow.contains("too large"), "{overflow}");
}

fn request(warmup: usize, repeat: usize) -> Request {
    Request {
        library: "m.so".to_string(),
        signature: "m.json".to_string(),
        weights: None,
        dims: BTreeMap::new(),
        warmup,
        repeat,
    }
}

#[test]
fn repeat_and_warmup_over_the_limit_are_refused_naming_the_flag() {
    assert!(check_counts(&request(2, 10), 10).is_ok());
    let error = check_counts(&request(2, usize::MAX), 10).unwrap_err();
    assert!(
        error.contains(&format!("repeat {} is over", usize::MAX))
            && error.contains("limit of 10 runs")
            && error.contains("--max-repeat"),
        "{error}"
    );
    let error = check_counts(&request(11, 1), 10).unwrap_err();
    assert!(error.contains("warmup 11 is over"), "{error}");
    assert!(check_counts(&request(0, 0), 10)
        .unwrap_err()
        .contains("at least 1"));
}

#[test]
fn an_oversized_repeat_is_refused_by_the_command_before_anything_is_loaded() {
    set_max_repeat(100);
    let error = time_model(
        r#"{"library": "m.so", "signature": "m.json", "weights": null, "warmup": 1, "repeat": 18446744073709551615}"#,
    )
    .unwrap_err();
    assert!(error.contains("--max-repeat"), "{error}");
}
