//! Where a strided, shifted walk along an input row falls inside it: the rest of the
//! walk reads padding (zeros); and copies and fills of the short runs such walks make.
//! Shared by im2col and the depthwise convolution.

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

/// `destination.copy_from_slice(source)` for short runs (im2col's, a depthwise plane's
/// rows), where a call to `memmove` costs more than the copy: whole chunks of 8 are
/// fixed-size copies (moves).
pub(crate) fn copy_short(destination: &mut [f32], source: &[f32]) {
    let mut chunks = destination.chunks_exact_mut(8);
    let mut sources = source.chunks_exact(8);
    for (to, from) in (&mut chunks).zip(&mut sources) {
        let from: &[f32; 8] = from.try_into().expect("chunks of 8");
        let to: &mut [f32; 8] = to.try_into().expect("chunks of 8");
        *to = *from;
    }
    for (to, from) in chunks.into_remainder().iter_mut().zip(sources.remainder()) {
        *to = *from;
    }
}

/// `run.fill(0.0)`, without a call to `memset` for the few values at a padded edge.
pub(crate) fn fill_zero(run: &mut [f32]) {
    if run.len() > 64 {
        run.fill(0.0);
    } else {
        for value in run {
            *value = 0.0;
        }
    }
}
