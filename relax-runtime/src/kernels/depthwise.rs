//! Depthwise convolutions: one input channel per group (MobileNet's and ShuffleNet's
//! 3x3 layers). As matrix products they would be one product of a single filter row per
//! channel, too small to use a matrix kernel.
//!
//! With stride 1 (most such layers), the input plane is copied into a zero-padded plane
//! first; then every output value is a weighted sum of the padded plane at fixed offsets
//! (one per kernel tap), so runs of 16 outputs are accumulated in registers over all
//! taps and stored once. Output positions are numbered along the padded rows, so a run
//! may cross a row end (the values past each row's end are computed and dropped). With a
//! larger stride, each output row is accumulated from strided runs of the input rows.

use std::cell::RefCell;

use super::edges::inside_columns;
use super::scratch::{prefix, reuse};
use super::simd::multiversion;

/// Outputs accumulated together in registers (one AVX-512 vector).
const LANES: usize = 16;

thread_local! {
    /// The padded input plane and the outputs along its rows, of the tasks on this thread.
    static PADDED: RefCell<Vec<f32>> = RefCell::default();
}

/// The sizes of one depthwise convolution's planes.
#[derive(Debug)]
pub(crate) struct Plane {
    pub(crate) height: usize,
    pub(crate) width: usize,
    pub(crate) output_height: usize,
    pub(crate) output_width: usize,
    pub(crate) kernel: (usize, usize),
    pub(crate) stride: (usize, usize),
    /// Top, left.
    pub(crate) padding: (usize, usize),
    pub(crate) dilation: (usize, usize),
    /// Per kernel column `kx`: the input column of output column 0 (`x0`), and the output
    /// columns `[low, high)` that read inside the input row.
    pub(crate) columns: Vec<(isize, usize, usize)>,
}

impl Plane {
    /// `columns` filled in for the other sizes.
    pub(crate) fn with_columns(mut self) -> Plane {
        self.columns = (0..self.kernel.1)
            .map(|kx| {
                let x0 = (kx * self.dilation.1) as isize - self.padding.1 as isize;
                let (low, high) = inside_columns(x0, self.stride.1, self.width, self.output_width);
                (x0, low, high)
            })
            .collect();
        self
    }
}

/// `out[oy][ox] = sum over (ky, kx) of weights[ky][kx] * input[y][x]`, with
/// `y = oy * stride + ky * dilation - top` (likewise x), 0 where that is padding.
/// `input` is one `height x width` plane, `out` one output plane.
pub(crate) fn depthwise_plane(plane: &Plane, input: &[f32], weights: &[f32], out: &mut [f32]) {
    if plane.stride == (1, 1) {
        reuse(&PADDED, |scratch| {
            padded_plane(plane, input, weights, out, scratch)
        });
    } else {
        strided_plane(plane, input, weights, out);
    }
}

multiversion! {
    /// [`depthwise_plane`] with stride 1, through a zero-padded copy of the plane (in
    /// `scratch`, with the outputs along its rows).
    fn padded_plane(plane: &Plane, input: &[f32], weights: &[f32], out: &mut [f32], scratch: &mut Vec<f32>) {
        let (kernel_h, kernel_w) = plane.kernel;
        let (dilation_h, dilation_w) = plane.dilation;
        let (top, left) = plane.padding;
        // Every window lies in the padded plane: stride 1, so its rows are the output's
        // plus the kernel's span, likewise its columns.
        let padded_width = plane.output_width + (kernel_w - 1) * dilation_w;
        let padded_height = plane.output_height + (kernel_h - 1) * dilation_h;
        // Outputs along the padded rows; the last run of LANES reads up to LANES past the
        // padded plane's end: zeros.
        let positions = (plane.output_height - 1) * padded_width + plane.output_width;
        let runs = positions.div_ceil(LANES);
        let padded_len = padded_height * padded_width + LANES;
        let buffer = prefix(scratch, padded_len + runs * LANES);
        let (padded, sums) = buffer.split_at_mut(padded_len);
        padded.iter_mut().for_each(|value| *value = 0.0);
        // With stride 1 the padded plane is the input plus all its padding
        // (`padded_width` = left + width + right), so every input value has its place.
        for (y, row) in input.chunks_exact(plane.width.max(1)).enumerate() {
            let start = (y + top) * padded_width + left;
            padded[start..start + row.len()].copy_from_slice(row);
        }
        for (run, sums) in sums.chunks_exact_mut(LANES).enumerate() {
            let base = run * LANES;
            let mut sum = [0f32; LANES];
            for ky in 0..kernel_h {
                for kx in 0..kernel_w {
                    let weight = weights[ky * kernel_w + kx];
                    let at = base + ky * dilation_h * padded_width + kx * dilation_w;
                    let taps: &[f32; LANES] = padded[at..at + LANES].try_into().expect("LANES values");
                    for (sum, tap) in sum.iter_mut().zip(taps) {
                        *sum += weight * tap;
                    }
                }
            }
            sums.copy_from_slice(&sum);
        }
        for (oy, row) in out.chunks_exact_mut(plane.output_width).enumerate() {
            row.copy_from_slice(&sums[oy * padded_width..oy * padded_width + plane.output_width]);
        }
    }
}

multiversion! {
    /// [`depthwise_plane`] with a stride above 1, output row by output row.
    fn strided_plane(plane: &Plane, input: &[f32], weights: &[f32], out: &mut [f32]) {
        let (kernel_h, kernel_w) = plane.kernel;
        out.iter_mut().for_each(|value| *value = 0.0);
        for (oy, row) in out.chunks_exact_mut(plane.output_width).enumerate() {
            for ky in 0..kernel_h {
                let y = (oy * plane.stride.0 + ky * plane.dilation.0) as isize - plane.padding.0 as isize;
                if y < 0 || y as usize >= plane.height {
                    continue;
                }
                let source = &input[y as usize * plane.width..(y as usize + 1) * plane.width];
                for (kx, &(x0, low, high)) in plane.columns.iter().enumerate() {
                    if low >= high {
                        continue;
                    }
                    let weight = weights[ky * kernel_w + kx];
                    let start = (x0 + (low * plane.stride.1) as isize) as usize;
                    let outputs = &mut row[low..high];
                    if plane.stride.1 == 1 {
                        let inputs = &source[start..start + outputs.len()];
                        outputs.iter_mut().zip(inputs).for_each(|(value, input)| *value += weight * input);
                    } else {
                        let inputs = source[start..].iter().step_by(plane.stride.1);
                        outputs.iter_mut().zip(inputs).for_each(|(value, input)| *value += weight * input);
                    }
                }
            }
        }
    }
}
