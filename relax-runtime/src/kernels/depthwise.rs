//! Depthwise convolutions: one input channel per group (MobileNet's and ShuffleNet's
//! 3x3 layers). As matrix products they would be one product of a single filter row per
//! channel, too small to use a matrix kernel; here each output plane is accumulated row
//! by row from shifted (or strided) rows of its one input plane.

use super::edges::inside_columns;
use super::simd::multiversion;

/// The sizes of one depthwise convolution's planes.
#[derive(Debug)]
pub(crate) struct Plane {
    pub(crate) height: usize,
    pub(crate) width: usize,
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

multiversion! {
    /// `out[oy][ox] = sum over (ky, kx) of weights[ky][kx] * input[y][x]`, with
    /// `y = oy * stride + ky * dilation - top` (likewise x), 0 where that is padding.
    /// `input` is one `height x width` plane, `out` one output plane.
    pub(crate) fn depthwise_plane(plane: &Plane, input: &[f32], weights: &[f32], out: &mut [f32]) {
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
