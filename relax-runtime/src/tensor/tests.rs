use super::*;

#[test]
fn from_slice_keeps_data_shape_and_dtype() {
    let tensor = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    assert_eq!(tensor.shape(), &[2, 3]);
    assert_eq!(tensor.dtype(), DType::F32);
    assert_eq!(
        tensor.as_slice::<f32>().unwrap(),
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
    assert_eq!(tensor.as_bytes().unwrap().len(), 24);
}

#[test]
fn from_slice_rejects_a_shape_of_another_size() {
    let error = Tensor::from_slice(&[1i32, 2, 3], &[2, 2]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid tensor: shape [2, 2] of int32 needs 16 bytes, but 12 were given"
    );
}

#[test]
fn as_slice_rejects_another_element_type() {
    let tensor = Tensor::from_slice(&[1i64, 2], &[2]).unwrap();
    let error = tensor.as_slice::<f32>().unwrap_err();
    assert_eq!(
        error.to_string(),
        "tensor holds int64 elements, not float32"
    );
}

#[test]
fn zero_sized_tensors_have_no_elements() {
    let tensor = Tensor::from_slice::<f32>(&[], &[0, 4]).unwrap();
    assert_eq!(tensor.num_elements(), 0);
    assert!(tensor.as_slice::<f32>().unwrap().is_empty());
}

/// A model summing away the empty dim of `[0, 2^62]` would return `[2^62]` floats over
/// an overflowed allocation: such shapes are refused when the tensor is made.
#[test]
fn empty_tensors_with_huge_other_dims_are_refused() {
    let error = Tensor::from_slice::<f32>(&[], &[0, 1 << 62]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid tensor: shape [0, 4611686018427387904] of float32 is larger than the address space"
    );
    assert!(Tensor::from_slice::<u8>(&[], &[0, usize::MAX]).is_err());
    assert!(Tensor::from_slice::<u8>(&[], &[0, 1 << 40]).is_ok());
}

#[test]
fn bool_tensors_hold_only_zero_and_one() {
    let error = Tensor::from_bytes(DType::BOOL, &[4], &[0, 1, 2, 255]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid tensor: byte 2 of a bool tensor is 2, but a bool is 0 or 1"
    );
    let ok = Tensor::from_bytes(DType::BOOL, &[3], &[0, 1, 1]).unwrap();
    assert_eq!(ok.as_slice::<bool>().unwrap(), &[false, true, true]);
}

#[test]
fn host_buffers_are_aligned() {
    let tensor = Tensor::from_slice(&[7u8; 3], &[3]).unwrap();
    assert_eq!(tensor.as_bytes().unwrap().as_ptr() as usize % ALIGNMENT, 0);
}

/// `Tensor` is `Sync`: many threads read one tensor and its clones at once.
#[test]
fn tensors_are_read_from_many_threads_at_once() {
    let values: Vec<f32> = (0..4096).map(|index| index as f32).collect();
    let tensor = Tensor::from_slice(&values, &[64, 64]).unwrap();
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                for _ in 0..2000 {
                    let copy = tensor.clone();
                    let data = copy.as_slice::<f32>().unwrap();
                    assert_eq!(data.len(), 4096);
                    assert_eq!(data[4095], 4095.0);
                    assert_eq!(tensor.shape(), &[64, 64]);
                }
            });
        }
    });
}

#[test]
fn sub_byte_tensors_hold_their_packed_bytes() {
    let int4 = DType {
        code: crate::sys::DLDataTypeCode_kDLInt as u8,
        bits: 4,
        lanes: 1,
    };
    // Five int4 values are three bytes as TVM allocates them; one byte each would read
    // two bytes past a buffer TVM made.
    let tensor = Tensor::from_bytes(int4, &[5], &[0x21, 0x43, 0x05]).unwrap();
    assert_eq!(tensor.num_elements(), 5);
    assert_eq!(tensor.as_bytes().unwrap(), &[0x21, 0x43, 0x05]);
    let error = Tensor::from_bytes(int4, &[5], &[0; 5]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid tensor: shape [5] of int4 needs 3 bytes, but 5 were given"
    );
}
