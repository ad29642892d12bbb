use super::*;

/// A model's output sized from its caller's inputs (relax_runtime.output) that cannot be
/// made is an error, checked before TVM or the allocator could fail otherwise.
#[test]
fn an_output_that_cannot_be_allocated_is_an_error() {
    let message = |shape: &[i64]| match zeroed_tvm_tensor(DType::F32, shape) {
        Ok(_) => panic!("an output of shape {shape:?} was made"),
        Err(error) => error.to_string(),
    };
    assert!(
        message(&[2, -1]).contains("has a negative size"),
        "{}",
        message(&[2, -1])
    );
    assert!(message(&[i64::MAX, 4]).contains("larger than the address space"));
    // 4 PiB: a size that fits isize, beyond what the allocator gives.
    let huge = message(&[1 << 50]);
    assert!(huge.contains("more than could be allocated"), "{huge}");
    // Data that fits isize, but not with the header in front of it.
    let edge = isize::MAX as usize - 127;
    assert_eq!(BlockLayout::new(1, edge), None);
    let error = zeroed_tvm_tensor(DType::U8, &[edge as i64]).err().unwrap();
    assert!(
        error.to_string().contains("larger than the address space"),
        "{error}"
    );
}

#[test]
fn a_block_has_room_for_the_header_the_shape_and_aligned_data_wherever_it_starts() {
    let header = std::mem::size_of::<Header>();
    for (rank, bytes) in [(0, 4), (1, 1), (2, 64), (4, 16 * 1024), (9, 3), (40, 100)] {
        let layout = BlockLayout::new(rank, bytes).unwrap();
        assert!(layout.shape_offset >= header, "{layout:?}");
        assert_eq!(
            layout.shape_end,
            layout.shape_offset + 8 * rank,
            "{layout:?}"
        );
        // Every start the allocator may give (aligned for the header).
        for start in (0..2 * ALIGNMENT).step_by(layout.whole.align()) {
            let data = layout.data_offset(start);
            assert_eq!((start + data) % ALIGNMENT, 0, "{layout:?} at {start}");
            assert!(data >= layout.shape_end, "{layout:?} at {start}");
            assert!(data + bytes <= layout.whole.size(), "{layout:?} at {start}");
        }
        // No more than an alignment's padding.
        assert!(
            layout.whole.size() < layout.shape_end + bytes + ALIGNMENT,
            "{layout:?}"
        );
    }
}

#[test]
fn a_block_describes_its_own_zeroed_data() {
    for (dtype, shape) in [
        (DType::F32, vec![1i64, 4]),
        (DType::I64, vec![3, 0, 5]),
        (DType::F32, vec![]),
        (DType::F16, vec![2, 3, 7, 5, 1, 2]),
    ] {
        let block = Block::zeroed(dtype, &shape).unwrap();
        // SAFETY: the block's header is initialized and lives while `block` does.
        let tensor = unsafe { &(*block.start.as_ptr()).managed.dl_tensor };
        assert_eq!(tensor.ndim as usize, shape.len());
        // SAFETY: the shape has `ndim` entries inside the block.
        let written = unsafe { std::slice::from_raw_parts(tensor.shape, shape.len()) };
        assert_eq!(written, &shape[..]);
        assert_eq!(tensor.data as usize % ALIGNMENT, 0);
        assert_eq!(DType::from_dlpack(tensor.dtype), dtype);
        assert!(tensor.strides.is_null());
        let elements: i64 = shape.iter().product();
        let bytes = elements as usize * dtype.size_in_bytes();
        // SAFETY: the data holds `bytes` zeroed bytes inside the block.
        let data = unsafe { std::slice::from_raw_parts(tensor.data.cast::<u8>(), bytes) };
        assert!(data.iter().all(|&byte| byte == 0), "{shape:?}");
        // Handed over, the block is freed by its deleter, as TVM calls it.
        let managed = block.into_dlpack();
        // SAFETY: the deleter of a block that was handed over, called once.
        unsafe { ((*managed).deleter.unwrap())(managed) };
    }
}
