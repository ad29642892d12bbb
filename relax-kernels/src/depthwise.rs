//! Depthwise convolutions: one input channel per group (MobileNet's and ShuffleNet's
//! 3x3 layers). As matrix products they would be one product of a single filter row per
//! channel, too small to use a matrix kernel.
//!
//! With stride 1 (most such layers), the input plane is copied into a zero-padded plane
//! first; then every output value is a weighted sum of the padded plane at fixed offsets
//! (one per kernel tap), so runs of 16 outputs are accumulated in registers over all
//! taps and stored once. Output positions are numbered along the padded rows, so a run
//! may cross a row end (the values past each row's end are computed and dropped): a 7x7
//! plane fills its vectors, not 7 lanes of 16 per row. With stride 2 on AVX-512 CPUs,
//! likewise through a zero-padded plane, output row by output row: a tap's 16 inputs
//! (every other value) are picked out of two vector loads by one permutation. With
//! another stride, each output row is accumulated from strided runs of the input rows.
//!
//! On AVX-512 CPUs (strides 1 and 2) the per-filter scale and shift, the residual and a
//! clamp are applied in registers as each run of outputs is stored in the output plane.

use std::cell::RefCell;

use super::edges::{copy_short, inside_columns};
use super::epilogue::Finish;
use super::scratch::{prefix, reuse};
use super::simd::{multiversion, Isa};

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

/// `out[oy][ox] = finish(sum over (ky, kx) of weights[ky][kx] * input[y][x])`, with
/// `y = oy * stride + ky * dilation - top` (likewise x), 0 where that is padding.
/// `input` is one `height x width` plane, `out` one output plane, `finish` its filter's.
///
/// With AVX-512 or AVX2 (`isa`), strides 1 and 2 apply `finish` in registers as each
/// run of outputs is stored (but a GELU or SiLU, applied to the plane after); other
/// paths apply it to the plane after. As a separate pass over small planes (7x7 to 14x14, hundreds of
/// channels), with the outputs copied row by row, it took more time than the sums in
/// MobileNetV2.
pub(crate) fn depthwise_plane(
    plane: &Plane,
    input: &[f32],
    weights: &[f32],
    finish: &Finish<'_>,
    out: &mut [f32],
    isa: Isa,
) {
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Portable && matches!(plane.stride, (1, 1) | (2, 2)) {
        reuse(&PADDED, |scratch| {
            // SAFETY: this CPU has `isa`'s instructions (the caller's contract), the
            // stride is 1 or 2.
            unsafe {
                if isa == Isa::Avx512 {
                    avx512::finished_plane(plane, input, weights, finish, out, scratch)
                } else {
                    avx2::finished_plane(plane, input, weights, finish, out, scratch)
                }
            }
        });
        if finish.epilogue.after_registers() {
            finish.epilogue.apply(out);
        }
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = isa; // Only x86-64 has the others.
    if plane.stride == (1, 1) {
        reuse(&PADDED, |scratch| {
            padded_plane(plane, input, weights, out, scratch)
        });
    } else {
        strided_plane(plane, input, weights, out);
    }
    finish.apply(out);
}

/// Copies `input` into a zero plane of `padded_width` columns and at least `rows` rows,
/// `top` rows and `left` columns in, followed by `margin` zeros (for vector reads past
/// its end); returns the plane and the rest of `scratch`'s first `extra` values.
fn zero_padded<'a>(
    plane: &Plane,
    input: &[f32],
    (padded_width, rows): (usize, usize),
    margin: usize,
    extra: usize,
    scratch: &'a mut Vec<f32>,
) -> (&'a mut [f32], &'a mut [f32]) {
    let (top, left) = plane.padding;
    let padded_len = rows * padded_width + margin;
    let buffer = prefix(scratch, padded_len + extra);
    let (padded, rest) = buffer.split_at_mut(padded_len);
    padded.iter_mut().for_each(|value| *value = 0.0);
    for (y, row) in input.chunks_exact(plane.width.max(1)).enumerate() {
        let start = (y + top) * padded_width + left;
        copy_short(&mut padded[start..start + row.len()], row);
    }
    (padded, rest)
}

multiversion! {
    /// [`depthwise_plane`] with stride 1, through a zero-padded copy of the plane (in
    /// `scratch`, with the outputs along its rows).
    fn padded_plane(plane: &Plane, input: &[f32], weights: &[f32], out: &mut [f32], scratch: &mut Vec<f32>) {
        let (kernel_h, kernel_w) = plane.kernel;
        let (dilation_h, dilation_w) = plane.dilation;
        // Every window lies in the padded plane: stride 1, so its rows are the output's
        // plus the kernel's span, likewise its columns.
        let padded_width = plane.output_width + (kernel_w - 1) * dilation_w;
        let padded_height = plane.output_height + (kernel_h - 1) * dilation_h;
        // Outputs along the padded rows; the last run of LANES reads up to LANES past the
        // padded plane's end: zeros.
        let positions = (plane.output_height - 1) * padded_width + plane.output_width;
        let runs = positions.div_ceil(LANES);
        // With stride 1 the padded plane is the input plus all its padding
        // (`padded_width` = left + width + right), so every input value has its place.
        let (padded, sums) =
            zero_padded(plane, input, (padded_width, padded_height), LANES, runs * LANES, scratch);
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

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{zero_padded, Plane};
    use crate::epilogue::Finish;

    /// Outputs per vector; each step sums two vectors of outputs (independent
    /// accumulators, so that the multiply-adds overlap).
    const LANES: usize = 8;
    const RUN: usize = 2 * LANES;

    /// [`depthwise_plane`](super::depthwise_plane) with stride 1 or 2, through a
    /// zero-padded copy of the plane, `finish` applied in registers (but a GELU or SiLU,
    /// left to the caller).
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `plane.stride` is (1, 1) or (2, 2).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn finished_plane(
        plane: &Plane,
        input: &[f32],
        weights: &[f32],
        finish: &Finish<'_>,
        out: &mut [f32],
        scratch: &mut Vec<f32>,
    ) {
        let finish = InRegisters {
            scale: _mm256_set1_ps(finish.scale),
            shift: _mm256_set1_ps(finish.shift),
            residual: finish.residual,
            clamp: finish.epilogue.bounds(),
        };
        if plane.stride == (1, 1) {
            stride1_plane(plane, input, weights, &finish, out, scratch);
        } else {
            stride2_plane(plane, input, weights, &finish, out, scratch);
        }
    }

    /// A plane's [`Finish`] as vectors.
    struct InRegisters<'a> {
        scale: __m256,
        shift: __m256,
        residual: Option<&'a [f32]>,
        clamp: Option<(f32, f32)>,
    }

    impl InRegisters<'_> {
        /// Finishes the sums `value` of the outputs `at..at + count` (count <= 8) of the
        /// plane and stores them there in `out`.
        #[target_feature(enable = "avx2,fma")]
        fn store(&self, value: __m256, out: &mut [f32], at: usize, count: usize) {
            let mut value = _mm256_fmadd_ps(value, self.scale, self.shift);
            if let Some(residual) = self.residual {
                let mut values = [0f32; LANES];
                values[..count].copy_from_slice(&residual[at..at + count]);
                // SAFETY: `values` holds 8 values.
                value = _mm256_add_ps(value, unsafe { _mm256_loadu_ps(values.as_ptr()) });
            }
            if let Some((low, high)) = self.clamp {
                value = _mm256_min_ps(
                    _mm256_max_ps(value, _mm256_set1_ps(low)),
                    _mm256_set1_ps(high),
                );
            }
            let out = &mut out[at..at + count];
            if count == LANES {
                // SAFETY: `out` holds 8 values.
                unsafe { _mm256_storeu_ps(out.as_mut_ptr(), value) };
            } else {
                let mut values = [0f32; LANES];
                // SAFETY: `values` holds 8 values.
                unsafe { _mm256_storeu_ps(values.as_mut_ptr(), value) };
                out.copy_from_slice(&values[..count]);
            }
        }
    }

    /// Stride 1, as the AVX-512 path: outputs numbered along the padded rows, summed
    /// into `scratch` 16 at a time, then finished row by row into `out`.
    #[target_feature(enable = "avx2,fma")]
    fn stride1_plane(
        plane: &Plane,
        input: &[f32],
        weights: &[f32],
        finish: &InRegisters<'_>,
        out: &mut [f32],
        scratch: &mut Vec<f32>,
    ) {
        let (kernel_h, kernel_w) = plane.kernel;
        let (dilation_h, dilation_w) = plane.dilation;
        let output_width = plane.output_width;
        let padded_width = output_width + (kernel_w - 1) * dilation_w;
        let padded_height = plane.output_height + (kernel_h - 1) * dilation_h;
        let positions = (plane.output_height - 1) * padded_width + output_width;
        let runs = positions.div_ceil(RUN);
        // The sums of every run, and 8 more read past the last row's end (dropped).
        let (padded, sums) = zero_padded(
            plane,
            input,
            (padded_width, padded_height),
            RUN,
            runs * RUN + LANES,
            scratch,
        );
        for (run, sums) in sums.chunks_exact_mut(RUN).take(runs).enumerate() {
            let base = run * RUN;
            let (mut low, mut high) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            for ky in 0..kernel_h {
                for kx in 0..kernel_w {
                    let at = base + ky * dilation_h * padded_width + kx * dilation_w;
                    // The 16 values from `at`: `base + 15` is below `positions + 15`, so
                    // `at + 15` is inside the margin of 16 past the plane.
                    let taps = &padded[at..at + RUN];
                    let weight = _mm256_set1_ps(weights[ky * kernel_w + kx]);
                    // SAFETY: `taps` holds 16 values.
                    unsafe {
                        low = _mm256_fmadd_ps(weight, _mm256_loadu_ps(taps.as_ptr()), low);
                        high = _mm256_fmadd_ps(
                            weight,
                            _mm256_loadu_ps(taps.as_ptr().add(LANES)),
                            high,
                        );
                    }
                }
            }
            // SAFETY: `sums` holds 16 values.
            unsafe {
                _mm256_storeu_ps(sums.as_mut_ptr(), low);
                _mm256_storeu_ps(sums.as_mut_ptr().add(LANES), high);
            }
        }
        for oy in 0..plane.output_height {
            for first in (0..output_width).step_by(LANES) {
                let count = LANES.min(output_width - first);
                // The row's sums, and past its end those of the padding (dropped).
                let row = &sums[oy * padded_width + first..][..LANES];
                // SAFETY: `row` holds 8 values.
                let value = unsafe { _mm256_loadu_ps(row.as_ptr()) };
                finish.store(value, out, oy * output_width + first, count);
            }
        }
    }

    /// The even values of the 16 from `values`.
    #[target_feature(enable = "avx2")]
    fn evens(values: &[f32]) -> __m256 {
        let values = &values[..2 * LANES];
        // SAFETY: `values` holds 16 values.
        let (low, high) = unsafe {
            (
                _mm256_loadu_ps(values.as_ptr()),
                _mm256_loadu_ps(values.as_ptr().add(LANES)),
            )
        };
        // [0, 2, 8, 10, 4, 6, 12, 14], then its 64-bit pairs in order.
        let picked = _mm256_shuffle_ps::<0x88>(low, high);
        _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(picked)))
    }

    /// Stride 2, output row by output row, 16 outputs at a time: a tap's 8 outputs sum
    /// the even values of 16 consecutive padded values.
    #[target_feature(enable = "avx2,fma")]
    fn stride2_plane(
        plane: &Plane,
        input: &[f32],
        weights: &[f32],
        finish: &InRegisters<'_>,
        out: &mut [f32],
        scratch: &mut Vec<f32>,
    ) {
        let (kernel_h, kernel_w) = plane.kernel;
        let (dilation_h, dilation_w) = plane.dilation;
        let (top, left) = plane.padding;
        let span_w = (kernel_w - 1) * dilation_w + 1;
        let span_h = (kernel_h - 1) * dilation_h + 1;
        let padded_width = (left + plane.width).max(2 * (plane.output_width - 1) + span_w);
        let padded_height = (top + plane.height).max(2 * (plane.output_height - 1) + span_h);
        // A step reads 32 values from its first tap; the last step of a row, which may
        // pass the row's end, up to 32 past the last window (see the AVX-512 path).
        let (padded, _) = zero_padded(
            plane,
            input,
            (padded_width, padded_height),
            2 * RUN,
            0,
            scratch,
        );
        let output_width = plane.output_width;
        for oy in 0..plane.output_height {
            for first in (0..output_width).step_by(RUN) {
                let (mut low, mut high) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                for ky in 0..kernel_h {
                    let line = (2 * oy + ky * dilation_h) * padded_width + 2 * first;
                    for kx in 0..kernel_w {
                        let at = line + kx * dilation_w;
                        let weight = _mm256_set1_ps(weights[ky * kernel_w + kx]);
                        low = _mm256_fmadd_ps(weight, evens(&padded[at..]), low);
                        high = _mm256_fmadd_ps(weight, evens(&padded[at + RUN..]), high);
                    }
                }
                let at = oy * output_width + first;
                finish.store(low, out, at, LANES.min(output_width - first));
                if first + LANES < output_width {
                    finish.store(
                        high,
                        out,
                        at + LANES,
                        LANES.min(output_width - first - LANES),
                    );
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{zero_padded, Plane, LANES};
    use crate::epilogue::Finish;
    use crate::simd::first_lanes;

    /// [`depthwise_plane`](super::depthwise_plane) with stride 1 or 2, through a
    /// zero-padded copy of the plane, `finish` applied in registers (but a GELU or SiLU,
    /// left to the caller).
    ///
    /// # Safety
    /// The CPU has AVX-512F; `plane.stride` is (1, 1) or (2, 2).
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn finished_plane(
        plane: &Plane,
        input: &[f32],
        weights: &[f32],
        finish: &Finish<'_>,
        out: &mut [f32],
        scratch: &mut Vec<f32>,
    ) {
        let finish = InRegisters {
            scale: _mm512_set1_ps(finish.scale),
            shift: _mm512_set1_ps(finish.shift),
            residual: finish.residual,
            clamp: finish.epilogue.bounds(),
        };
        // SAFETY: the caller's contract.
        unsafe {
            if plane.stride == (1, 1) {
                stride1_plane(plane, input, weights, &finish, out, scratch);
            } else {
                stride2_plane(plane, input, weights, &finish, out, scratch);
            }
        }
    }

    /// A plane's [`Finish`] as vectors.
    struct InRegisters<'a> {
        scale: __m512,
        shift: __m512,
        residual: Option<&'a [f32]>,
        clamp: Option<(f32, f32)>,
    }

    impl InRegisters<'_> {
        /// Finishes the sums `value` of the outputs `at..at + count` (count <= 16) of the
        /// plane and stores them there in `out`.
        #[target_feature(enable = "avx512f")]
        fn store(&self, value: __m512, out: &mut [f32], at: usize, count: usize) {
            let out = &mut out[at..at + count];
            let mask = first_lanes(count);
            let mut value = _mm512_fmadd_ps(value, self.scale, self.shift);
            if let Some(residual) = self.residual {
                let residual = &residual[at..at + count];
                // SAFETY: the masked lanes are `residual`'s `count` values.
                value = _mm512_add_ps(value, unsafe {
                    _mm512_maskz_loadu_ps(mask, residual.as_ptr())
                });
            }
            if let Some((low, high)) = self.clamp {
                value = _mm512_min_ps(
                    _mm512_max_ps(value, _mm512_set1_ps(low)),
                    _mm512_set1_ps(high),
                );
            }
            // SAFETY: the masked lanes are `out`'s `count` values.
            unsafe { _mm512_mask_storeu_ps(out.as_mut_ptr(), mask, value) };
        }
    }

    /// Stride 1: the outputs are numbered along the padded rows, so runs of 16 cross the
    /// rows' ends (7x7 and 14x14 planes would fill 7 or 14 lanes of 16 per row), summed
    /// into `scratch` (the values past each row's end are computed and dropped), then
    /// finished row by row into `out`.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `plane.stride` is (1, 1).
    #[target_feature(enable = "avx512f")]
    unsafe fn stride1_plane(
        plane: &Plane,
        input: &[f32],
        weights: &[f32],
        finish: &InRegisters<'_>,
        out: &mut [f32],
        scratch: &mut Vec<f32>,
    ) {
        let (kernel_h, kernel_w) = plane.kernel;
        let (dilation_h, dilation_w) = plane.dilation;
        let output_width = plane.output_width;
        // The padded plane is the input plus all its padding (stride 1): every window
        // lies in it.
        let padded_width = output_width + (kernel_w - 1) * dilation_w;
        let padded_height = plane.output_height + (kernel_h - 1) * dilation_h;
        let positions = (plane.output_height - 1) * padded_width + output_width;
        let runs = positions.div_ceil(LANES);
        let (padded, sums) = zero_padded(
            plane,
            input,
            (padded_width, padded_height),
            LANES,
            runs * LANES,
            scratch,
        );
        for (run, sums) in sums.chunks_exact_mut(LANES).enumerate() {
            let base = run * LANES;
            let mut sum = _mm512_setzero_ps();
            for ky in 0..kernel_h {
                for kx in 0..kernel_w {
                    let at = base + ky * dilation_h * padded_width + kx * dilation_w;
                    // SAFETY: `base + 15` is below `positions + 15` and the tap's offset
                    // at most (kernel_h - 1) dilation_h padded_width + (kernel_w - 1)
                    // dilation_w, so `at + 15` is below padded_height x padded_width + 15:
                    // inside the margin of 16 past the plane.
                    let taps = unsafe { _mm512_loadu_ps(padded.as_ptr().add(at)) };
                    let weight = _mm512_set1_ps(weights[ky * kernel_w + kx]);
                    sum = _mm512_fmadd_ps(weight, taps, sum);
                }
            }
            // SAFETY: `sums` is 16 values.
            unsafe { _mm512_storeu_ps(sums.as_mut_ptr(), sum) };
        }
        for oy in 0..plane.output_height {
            for first in (0..output_width).step_by(LANES) {
                let count = LANES.min(output_width - first);
                let row = &sums[oy * padded_width + first..][..count];
                // SAFETY: the masked lanes are `row`'s values.
                let value = unsafe { _mm512_maskz_loadu_ps(first_lanes(count), row.as_ptr()) };
                finish.store(value, out, oy * output_width + first, count);
            }
        }
    }

    /// Stride 2 (MobileNet's downsampling layers), output row by output row: each run of
    /// 16 outputs of a row sums, over the kernel's taps, the even values of 32
    /// consecutive padded values, picked out of two vector loads by one permutation.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `plane.stride` is (2, 2).
    #[target_feature(enable = "avx512f")]
    unsafe fn stride2_plane(
        plane: &Plane,
        input: &[f32],
        weights: &[f32],
        finish: &InRegisters<'_>,
        out: &mut [f32],
        scratch: &mut Vec<f32>,
    ) {
        let (kernel_h, kernel_w) = plane.kernel;
        let (dilation_h, dilation_w) = plane.dilation;
        let (top, left) = plane.padding;
        // Wide and high enough for the input and for every window: the last output's
        // window ends at 2 (outputs - 1) + span.
        let span_w = (kernel_w - 1) * dilation_w + 1;
        let span_h = (kernel_h - 1) * dilation_h + 1;
        let padded_width = (left + plane.width).max(2 * (plane.output_width - 1) + span_w);
        let padded_height = (top + plane.height).max(2 * (plane.output_height - 1) + span_h);
        // A run reads 2 x 16 values from its first tap; the last run of a row, which
        // may pass the row's end, up to 2 x 16 past the last window.
        let (padded, _) = zero_padded(
            plane,
            input,
            (padded_width, padded_height),
            4 * LANES,
            0,
            scratch,
        );
        let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let output_width = plane.output_width;
        for oy in 0..plane.output_height {
            for first in (0..output_width).step_by(LANES) {
                let mut sum = _mm512_setzero_ps();
                for ky in 0..kernel_h {
                    let line = (2 * oy + ky * dilation_h) * padded_width + 2 * first;
                    for kx in 0..kernel_w {
                        let at = line + kx * dilation_w;
                        // SAFETY: the 32 values from `at` are inside `padded`: its row is
                        // at most 2 (output_height - 1) + span_h - 1 < padded_height, its
                        // column at most 2 (output_width - 1) + span_w - 1 < padded_width,
                        // so `at + 31` is below padded_height x padded_width + 31, inside
                        // the margin of 64 past the plane.
                        let taps = unsafe {
                            let values = padded.as_ptr().add(at);
                            _mm512_permutex2var_ps(
                                _mm512_loadu_ps(values),
                                evens,
                                _mm512_loadu_ps(values.add(LANES)),
                            )
                        };
                        let weight = _mm512_set1_ps(weights[ky * kernel_w + kx]);
                        sum = _mm512_fmadd_ps(weight, taps, sum);
                    }
                }
                let count = LANES.min(output_width - first);
                finish.store(sum, out, oy * output_width + first, count);
            }
        }
    }
}
