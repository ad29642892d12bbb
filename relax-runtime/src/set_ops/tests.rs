use super::*;

fn floats(values: &[f64]) -> Vec<Number> {
    values.iter().map(|&value| Number::Float(value)).collect()
}

/// `groups` over single values, as (first, counts, inverse).
fn grouped(values: &[Number], sorted: bool) -> (Vec<usize>, Vec<i64>, Vec<i64>) {
    let groups = groups(values.len(), sorted, |a, b| values[a].order(values[b]));
    (groups.first, groups.counts, groups.inverse)
}

#[test]
fn sorted_groups_are_numpys_unique() {
    // np.unique([2, 1, 1, 3, 4, 3], return_index, return_inverse, return_counts)
    let values: Vec<Number> = [2, 1, 1, 3, 4, 3].map(Number::Int).to_vec();
    let (first, counts, inverse) = grouped(&values, true);
    assert_eq!(first, [1, 0, 3, 4]);
    assert_eq!(counts, [2, 1, 2, 1]);
    assert_eq!(inverse, [1, 0, 0, 2, 3, 2]);
}

#[test]
fn unsorted_groups_keep_first_occurrence_order() {
    let values: Vec<Number> = [2, 1, 1, 3, 4, 3].map(Number::Int).to_vec();
    let (first, counts, inverse) = grouped(&values, false);
    assert_eq!(first, [0, 1, 3, 4]);
    assert_eq!(counts, [1, 2, 2, 1]);
    assert_eq!(inverse, [0, 1, 1, 2, 3, 2]);
}

#[test]
fn floats_compare_as_numpy_does() {
    let values = floats(&[f64::NAN, 0.0, -0.0, -1.5, f64::NAN, f64::INFINITY]);
    let (first, counts, _) = grouped(&values, true);
    // -1.5, then 0 (with -0), infinity, and the NaNs last, as one value.
    assert_eq!(first, [3, 1, 5, 0]);
    assert_eq!(counts, [1, 2, 1, 2]);
    assert!(Number::Float(-0.0).is_zero());
    assert!(!Number::Float(f64::NAN).is_zero());
}

#[test]
fn an_empty_input_has_no_groups() {
    let (first, counts, inverse) = grouped(&[], true);
    assert!(first.is_empty() && counts.is_empty() && inverse.is_empty());
}

#[test]
fn coordinates_are_rows_of_indices_per_dim() {
    // np.nonzero of a [2, 3] tensor non-zero at offsets 1, 3 and 5.
    assert_eq!(coordinates(&[2, 3], &[1, 3, 5]), [0, 1, 1, 1, 0, 2]);
    assert_eq!(coordinates(&[4], &[0, 2]), [0, 2]);
    assert!(coordinates(&[2, 0], &[]).is_empty());
}

#[test]
fn elements_are_read_in_their_dtype() {
    let shape = [3i64];
    let bytes = [0xffu8, 0x01, 0x80];
    let int8 = Input {
        dtype: DType::I8,
        shape: &shape,
        bytes: &bytes,
    };
    let read: Vec<i128> = (0..3)
        .map(|index| match int8.number(index) {
            Number::Int(value) => value,
            Number::Float(_) => panic!("int8 reads as an integer"),
        })
        .collect();
    assert_eq!(read, [-1, 1, -128]);
    let uint8 = Input {
        dtype: DType::U8,
        ..int8
    };
    assert!(matches!(uint8.number(2), Number::Int(128)));
    let half = [0x00u8, 0x3e, 0x00, 0x80];
    let f16 = Input {
        dtype: DType::F16,
        shape: &[2],
        bytes: &half,
    };
    assert!(matches!(f16.number(0), Number::Float(value) if value == 1.5));
    assert!(f16.number(1).is_zero(), "-0.0 is zero");
}

#[test]
fn slicing_is_around_the_axis_and_refuses_one_out_of_range() {
    let whole = Slicing {
        axis: None,
        outer: 1,
        slices: 24,
        inner: 1,
    };
    assert_eq!(slicing(&[2, 3, 4], None), Ok(whole));
    let middle = Slicing {
        axis: Some(1),
        outer: 2,
        slices: 3,
        inner: 4,
    };
    assert_eq!(slicing(&[2, 3, 4], Some(-2)), Ok(middle));
    assert_eq!(
        slicing(&[2, 3], Some(2)),
        Err("axis 2 is out of range for x of shape [2, 3]".to_string())
    );
    assert_eq!(
        slicing(&[2, 3], Some(-3)),
        Err("axis -3 is out of range for x of shape [2, 3]".to_string())
    );
}
