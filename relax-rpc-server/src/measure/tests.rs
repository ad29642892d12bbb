use relax_runtime::signature::WeightLayout;

use super::*;

fn input(shape: Vec<Dim>) -> TensorSignature {
    TensorSignature {
        name: "x".to_string(),
        dtype: DType::F32,
        shape,
        layout: WeightLayout::Stored,
        columns: None,
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
