//! Where a strided, shifted walk along an input row falls inside it: the rest of the
//! walk reads padding (zeros). Shared by im2col and the depthwise convolution.

/// The output columns `[low, high)` of `0..output_width` whose input column
/// `x0 + ox * stride` falls inside a row of `width` values.
pub(crate) fn inside_columns(
    x0: isize,
    stride: usize,
    width: usize,
    output_width: usize,
) -> (usize, usize) {
    let (width, stride) = (width as isize, stride as isize);
    let low = if x0 >= 0 {
        0
    } else {
        (-x0 + stride - 1) / stride
    };
    let high = if x0 >= width {
        0
    } else {
        (width - x0 + stride - 1) / stride
    };
    let clamp = |value: isize| (value.max(0) as usize).min(output_width);
    (clamp(low), clamp(high))
}
