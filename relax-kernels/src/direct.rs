//! Direct convolutions of few input channels onto wide rows: a network's stem (an
//! image's 3 channels onto 8-64 filters, 3x3 or 7x7 with stride 2).
//!
//! As a matrix product (im2col), such a layer unfolds 27-147 values per output pixel and
//! multiplies them by only 8-64 filters: writing and reading the unfolded patches costs
//! about as much as the product. Here the sums are made in registers instead: 8 filters
//! by 32 output pixels of one row, a tap at a time (its 32 inputs loaded once for the 8
//! filters' weights), so nothing is unfolded.
//!
//! A tap's 32 inputs must be consecutive values. Each unit of work (a band of output
//! rows) first copies the input rows it reads into zero-padded *phase rows*: with stride
//! `s`, phase `q` of an input row holds its columns `q, q + s, q + 2s, ...` (counted from
//! the left padding), so that output column `ox` of tap `kx` reads value `ox + kx / s`
//! of phase `kx % s` (dilation included). The copy is one pass over the band's input.
//!
//! On AVX-512 CPUs the per-filter scale and shift, the residual and a clamp are applied
//! in registers as the sums are stored (a GELU, SiLU or hard-swish to the stored row
//! after); elsewhere a portable path (16-lane arrays) applies them to the stored row.

use std::cell::RefCell;

use super::conv_operands::{finish_of, Conv2d, Operands};
use super::parallel::{for_each_unit, Launch, Shared, INLINE_WORK};
use super::scratch::{prefix, reuse};
use super::simd::{multiversion, Isa};

/// Filters summed together (their weights broadcast from one row of the packed kernel).
const FILTERS: usize = 8;

/// Output pixels summed together: two 16-lane vectors, so that 8 filters by 32 pixels
/// are 16 accumulators beside the inputs and weights (AVX-512 has 32 registers).
const PIXELS: usize = 32;

/// Input channels up to which [`computes`] takes a convolution (an image's 1, 3 or 4).
const MAX_CHANNELS: usize = 4;

/// Output rows in a unit of work (fewer where that would leave under [`MIN_UNITS`]):
/// neighbouring output rows share most of their input rows, which a band copies once.
const BAND_ROWS: usize = 4;

/// Units of work a call is split into at least, where its rows allow.
const MIN_UNITS: usize = 8;

thread_local! {
    /// The phase rows of the units that run on this thread, and a padded input row.
    static PHASES: RefCell<Vec<f32>> = RefCell::default();
}

/// Whether the direct sums compute `shape` best (one group, at most [`MAX_CHANNELS`]
/// input channels, output rows of at least 16 pixels, a CPU with AVX2 or AVX-512), and
/// with which instructions; im2col does otherwise.
pub(crate) fn computes(shape: &Conv2d, output_width: usize) -> Option<Isa> {
    let fits = shape.groups == 1
        && (1..=MAX_CHANNELS).contains(&shape.channels)
        && output_width >= PIXELS / 2;
    let isa = Isa::best();
    (fits && isa != Isa::Portable).then_some(isa)
}

/// The OIHW kernel `[F, C, KH, KW]` as `[ceil(F / 8), C * KH * KW, 8]`: each tap's
/// weights of 8 filters side by side, zeros for the filters past `F`.
fn packed_kernel(w: &[f32], filters: usize, depth: usize) -> Vec<f32> {
    let tiles = filters.div_ceil(FILTERS);
    let mut packed = vec![0f32; tiles * depth * FILTERS];
    for (filter, kernel) in w.chunks_exact(depth).enumerate() {
        let (tile, lane) = (filter / FILTERS, filter % FILTERS);
        for (tap, &weight) in kernel.iter().enumerate() {
            packed[(tile * depth + tap) * FILTERS + lane] = weight;
        }
    }
    packed
}

/// How a band's phase rows are laid out: `[C, rows, stride_w, length]`, row `yi` of the
/// band being input row `first_row + yi`.
#[derive(Debug, Clone, Copy)]
struct PhaseRows {
    /// Input rows per band (its output rows' windows).
    rows: usize,
    /// Values per phase row: whole runs of [`PIXELS`] plus the largest tap offset.
    length: usize,
    stride: usize,
}

impl PhaseRows {
    fn values(self, channels: usize) -> usize {
        channels * self.rows * self.stride * self.length
    }

    fn start(self, channel: usize, row: usize, phase: usize) -> usize {
        ((channel * self.rows + row) * self.stride + phase) * self.length
    }
}

/// `out = epilogue(conv2d(x, w) * scale + shift + residual)` by direct sums, with `w`
/// OIHW and every tensor NCHW; the sums made with the instructions of `isa`.
///
/// # Safety
/// `x` holds `shape.batch * C * H * W` values, `w` `[F, C, KH, KW]`, `out` and `residual`
/// `[N, F, OH, OW]`, `per_filter` a value per filter; all valid for the call, and `out`
/// overlaps none of the others. `shape.groups == 1`. `isa` one this CPU runs
/// ([`Isa::runs_here`]).
pub(crate) unsafe fn direct_conv(
    shape: &Conv2d,
    isa: Isa,
    operands: Operands<'_>,
    launch: Launch,
) -> Result<(), String> {
    let Operands {
        x,
        w,
        per_filter,
        residual,
        epilogue,
        out,
    } = operands;
    let (output_height, output_width) = shape
        .output()
        .ok_or("the kernel does not fit the padded input")?;
    let (channels, filters) = (shape.channels, shape.filters);
    let (kernel_h, kernel_w) = shape.kernel;
    let (stride_h, stride_w) = shape.stride;
    let (dilation_h, dilation_w) = shape.dilation;
    let depth = channels * kernel_h * kernel_w;
    if depth == 0 {
        return Err("a direct convolution needs input channels and kernel taps".to_string());
    }
    // SAFETY: the caller's contract: `w` holds `F * C * KH * KW` values, read only.
    let packed = packed_kernel(
        unsafe { std::slice::from_raw_parts(w, filters * depth) },
        filters,
        depth,
    );
    let band = BAND_ROWS.min(output_height.div_ceil(MIN_UNITS)).max(1);
    let bands = output_height.div_ceil(band);
    let layout = PhaseRows {
        rows: (band - 1) * stride_h + (kernel_h - 1) * dilation_h + 1,
        length: output_width.next_multiple_of(PIXELS) + (kernel_w - 1) * dilation_w / stride_w,
        stride: stride_w,
    };
    // Where each tap (channel, ky, kx) reads in the band's first output row; a row
    // further down reads `row_step` values on.
    let taps: Vec<usize> = (0..channels)
        .flat_map(|channel| {
            (0..kernel_h).flat_map(move |ky| {
                (0..kernel_w).map(move |kx| {
                    let column = kx * dilation_w;
                    layout.start(channel, ky * dilation_h, column % stride_w) + column / stride_w
                })
            })
        })
        .collect();
    let row_step = stride_h * stride_w * layout.length;
    let (input_plane, output_plane) = (shape.height * shape.width, output_height * output_width);
    let (x, residual) = (
        Shared(x.cast_mut()),
        residual.map(|residual| Shared(residual.cast_mut())),
    );
    let work = shape.batch * output_plane * filters * depth;
    for_each_unit(launch, work < INLINE_WORK, shape.batch * bands, &|unit| {
        let (image, band_index) = (unit / bands, unit % bands);
        let rows = band_index * band..((band_index + 1) * band).min(output_height);
        // SAFETY: image `image`'s input planes, read only (inside the checked `x`).
        let input = unsafe {
            std::slice::from_raw_parts(
                x.at(image * channels * input_plane).cast_const(),
                channels * input_plane,
            )
        };
        reuse(&PHASES, |scratch| {
            let scratch = prefix(scratch, layout.values(channels) + layout.length * stride_w);
            let (phases, padded) = scratch.split_at_mut(layout.values(channels));
            let first_row = (rows.start * stride_h) as isize - shape.padding.0 as isize;
            fill_phase_rows(shape, layout, input, first_row, phases, padded);
            for oy in rows.clone() {
                let base = (oy - rows.start) * row_step;
                for (tile, weights) in packed.chunks_exact(depth * FILTERS).enumerate() {
                    let first_filter = tile * FILTERS;
                    let count = FILTERS.min(filters - first_filter);
                    let row_of = |filter: usize| {
                        ((image * filters + first_filter + filter) * output_height + oy)
                            * output_width
                    };
                    let mut outputs: [&mut [f32]; FILTERS] = std::array::from_fn(|filter| {
                        if filter < count {
                            // SAFETY: output row `oy` of this filter is this unit's alone
                            // (units are disjoint bands of rows, each run once), inside
                            // the checked `out`.
                            unsafe {
                                std::slice::from_raw_parts_mut(out.at(row_of(filter)), output_width)
                            }
                        } else {
                            Default::default()
                        }
                    });
                    let residuals: [&[f32]; FILTERS] = std::array::from_fn(|filter| {
                        match residual {
                            // SAFETY: the residual's row `oy` of this filter, read only,
                            // inside the checked `residual`.
                            Some(residual) if filter < count => unsafe {
                                std::slice::from_raw_parts(
                                    residual.at(row_of(filter)).cast_const(),
                                    output_width,
                                )
                            },
                            _ => &[],
                        }
                    });
                    let finishes: [_; FILTERS] = std::array::from_fn(|filter| {
                        let residual = residual.map(|_| residuals[filter]);
                        finish_of(
                            per_filter,
                            (first_filter + filter).min(filters - 1),
                            residual,
                            epilogue,
                        )
                    });
                    // The output rows this tile stores next (in a band's first row, this
                    // one too), asked for now: inside a model they are out of the caches,
                    // and the stores into 8 rows at once otherwise wait on each line.
                    // MobileNetV2's stem, one core (`cargo bench -p relax-kernels --
                    // "3->32"`, runs in turn): with the caches evicted 0.35-0.39 ms before,
                    // 0.30-0.32 after; with them warm 0.149-0.156 before, 0.159-0.162 after.
                    #[cfg(target_arch = "x86_64")]
                    {
                        let first = if oy == rows.start { oy } else { oy + 1 };
                        for prefetched in first..(oy + 2).min(rows.end) {
                            for filter in 0..count {
                                let start = row_of(filter) + (prefetched - oy) * output_width;
                                let row = out.at(start).cast_const();
                                for line in (0..output_width).step_by(super::caches::LINE_VALUES) {
                                    // SAFETY: a hint only: a prefetch of any address is
                                    // sound (these lie in this unit's output rows).
                                    unsafe {
                                        std::arch::x86_64::_mm_prefetch::<
                                            { std::arch::x86_64::_MM_HINT_T0 },
                                        >(
                                            row.wrapping_add(line).cast()
                                        )
                                    };
                                }
                            }
                        }
                    }
                    let tile = Tile {
                        phases,
                        taps: &taps,
                        base,
                        weights,
                    };
                    // Whether the sums were finished as they were stored (but a GELU, SiLU
                    // or hard-swish).
                    let in_registers = match isa {
                        #[cfg(target_arch = "x86_64")]
                        Isa::Avx512 => {
                            // SAFETY: the caller's contract: the CPU has AVX-512F.
                            unsafe { avx512::sums(&tile, &finishes, &mut outputs) };
                            true
                        }
                        #[cfg(target_arch = "x86_64")]
                        Isa::Avx2 => {
                            // SAFETY: the caller's contract: the CPU has AVX2 and FMA.
                            unsafe { avx2::sums(&tile, &finishes, &mut outputs) };
                            true
                        }
                        _ => {
                            portable_sums(&tile, &mut outputs);
                            false
                        }
                    };
                    for (row, finish) in outputs.iter_mut().zip(&finishes) {
                        if !in_registers {
                            finish.apply(row);
                        } else if epilogue.after_registers() {
                            epilogue.apply(row);
                        }
                    }
                }
            }
        });
    })
}

/// What one output row's sums for one tile of filters read.
struct Tile<'a> {
    /// The band's phase rows.
    phases: &'a [f32],
    /// Where each tap reads in the band's first output row.
    taps: &'a [usize],
    /// What to add to `taps` for this output row.
    base: usize,
    /// The tile's packed kernel, `[C * KH * KW, 8]`.
    weights: &'a [f32],
}

/// Fills `phases` with the band's input rows from input row `first_row` (negative in the
/// top padding), each split in its `stride_w` phases with the left and right padding as
/// zeros; `padded` (a row's `length * stride_w` values) is scratch.
fn fill_phase_rows(
    shape: &Conv2d,
    layout: PhaseRows,
    input: &[f32],
    first_row: isize,
    phases: &mut [f32],
    padded: &mut [f32],
) {
    let (width, left) = (shape.width, shape.padding.1);
    for channel in 0..shape.channels {
        for row in 0..layout.rows {
            let y = first_row + row as isize;
            let start = layout.start(channel, row, 0);
            let destination = &mut phases[start..start + layout.stride * layout.length];
            if y < 0 || y as usize >= shape.height {
                destination.fill(0.0);
                continue;
            }
            let source = &input[(channel * shape.height + y as usize) * width..][..width];
            // The row with its padding: value `left + column` is input column `column`.
            let target = if layout.stride == 1 {
                &mut *destination
            } else {
                &mut *padded
            };
            let at = left.min(target.len());
            let copied = width.min(target.len() - at);
            target[..at].fill(0.0);
            target[at..at + copied].copy_from_slice(&source[..copied]);
            target[at + copied..].fill(0.0);
            if layout.stride > 1 {
                split_phases(padded, layout.stride, destination);
            }
        }
    }
}

multiversion! {
    /// `phases[q * length + j] = padded[j * stride + q]`: a padded row's `stride` phases,
    /// `length` values each.
    fn split_phases(padded: &[f32], stride: usize, phases: &mut [f32]) {
        let length = phases.len() / stride;
        if stride == 2 {
            let (even, odd) = phases.split_at_mut(length);
            for ((pair, even), odd) in padded.chunks_exact(2).zip(even).zip(odd) {
                *even = pair[0];
                *odd = pair[1];
            }
            return;
        }
        for (phase, values) in phases.chunks_exact_mut(length).enumerate() {
            for (value, source) in values.iter_mut().zip(padded[phase..].iter().step_by(stride)) {
                *value = *source;
            }
        }
    }
}

/// Filters and pixels the portable path sums together: 4 filters by 16 pixels are 8
/// AVX2 registers (of 16) or 16 NEON ones (of 32), beside the inputs and a weight.
const PORTABLE_FILTERS: usize = 4;
const PORTABLE_PIXELS: usize = 16;

multiversion! {
    /// The sums of one output row for one tile of filters, stored in `outputs` (a row
    /// per filter; an empty one for a filter past the last).
    fn portable_sums(tile: &Tile<'_>, outputs: &mut [&mut [f32]; FILTERS]) {
        let width = outputs[0].len();
        for start in (0..width).step_by(PORTABLE_PIXELS) {
            let count = PORTABLE_PIXELS.min(width - start);
            for (part, outputs) in outputs.chunks_exact_mut(PORTABLE_FILTERS).enumerate() {
                if outputs[0].is_empty() {
                    break;
                }
                let mut sums = [[0f32; PORTABLE_PIXELS]; PORTABLE_FILTERS];
                for (&at, weights) in tile.taps.iter().zip(tile.weights.chunks_exact(FILTERS)) {
                    let at = tile.base + at + start;
                    let inputs: &[f32; PORTABLE_PIXELS] = tile.phases[at..at + PORTABLE_PIXELS]
                        .try_into()
                        .expect("PORTABLE_PIXELS values");
                    let weights: &[f32; PORTABLE_FILTERS] = weights
                        [part * PORTABLE_FILTERS..][..PORTABLE_FILTERS]
                        .try_into()
                        .expect("PORTABLE_FILTERS weights");
                    for filter in 0..PORTABLE_FILTERS {
                        for pixel in 0..PORTABLE_PIXELS {
                            sums[filter][pixel] += weights[filter] * inputs[pixel];
                        }
                    }
                }
                for (row, sums) in outputs.iter_mut().zip(&sums) {
                    if let Some(row) = row.get_mut(start..start + count) {
                        row.copy_from_slice(&sums[..count]);
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Tile, FILTERS};
    use crate::epilogue::Finish;

    /// Filters and pixels summed together: 8 accumulators of the 16 registers.
    const PART_FILTERS: usize = 4;
    const PART_PIXELS: usize = 16;

    /// The sums of one output row for one tile of filters, each filter's `finish` but
    /// its GELU, SiLU or hard-swish applied as they are stored in `outputs` (a row per
    /// filter; an empty one for a filter past the last).
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn sums(
        tile: &Tile<'_>,
        finishes: &[Finish<'_>; FILTERS],
        outputs: &mut [&mut [f32]; FILTERS],
    ) {
        let width = outputs[0].len();
        let clamp = finishes[0].epilogue.bounds();
        for start in (0..width).step_by(PART_PIXELS) {
            let count = PART_PIXELS.min(width - start);
            for (part, outputs) in outputs.chunks_exact_mut(PART_FILTERS).enumerate() {
                if outputs[0].is_empty() {
                    break;
                }
                let mut sums = [[_mm256_setzero_ps(); 2]; PART_FILTERS];
                for (&at, weights) in tile.taps.iter().zip(tile.weights.chunks_exact(FILTERS)) {
                    let at = tile.base + at + start;
                    let inputs = &tile.phases[at..at + PART_PIXELS];
                    // SAFETY: `inputs` holds 16 values.
                    let inputs = unsafe {
                        [
                            _mm256_loadu_ps(inputs.as_ptr()),
                            _mm256_loadu_ps(inputs.as_ptr().add(8)),
                        ]
                    };
                    let weights = &weights[part * PART_FILTERS..][..PART_FILTERS];
                    for (sums, &weight) in sums.iter_mut().zip(weights) {
                        let weight = _mm256_set1_ps(weight);
                        sums[0] = _mm256_fmadd_ps(weight, inputs[0], sums[0]);
                        sums[1] = _mm256_fmadd_ps(weight, inputs[1], sums[1]);
                    }
                }
                let finishes = &finishes[part * PART_FILTERS..][..PART_FILTERS];
                for ((row, sums), finish) in outputs.iter_mut().zip(&sums).zip(finishes) {
                    let Some(row) = row.get_mut(start..start + count) else {
                        continue;
                    };
                    let (scale, shift) =
                        (_mm256_set1_ps(finish.scale), _mm256_set1_ps(finish.shift));
                    let mut values = sums.map(|sum| _mm256_fmadd_ps(sum, scale, shift));
                    if let Some(residual) = finish.residual {
                        let mut added = [0f32; PART_PIXELS];
                        added[..count].copy_from_slice(&residual[start..start + count]);
                        for (half, value) in values.iter_mut().enumerate() {
                            // SAFETY: `added` holds 16 values.
                            let residual = unsafe { _mm256_loadu_ps(added.as_ptr().add(half * 8)) };
                            *value = _mm256_add_ps(*value, residual);
                        }
                    }
                    if let Some((low, high)) = clamp {
                        let (low, high) = (_mm256_set1_ps(low), _mm256_set1_ps(high));
                        values = values.map(|value| _mm256_min_ps(_mm256_max_ps(value, low), high));
                    }
                    if count == PART_PIXELS {
                        // SAFETY: `row` holds 16 values.
                        unsafe {
                            _mm256_storeu_ps(row.as_mut_ptr(), values[0]);
                            _mm256_storeu_ps(row.as_mut_ptr().add(8), values[1]);
                        }
                        continue;
                    }
                    let mut stored = [0f32; PART_PIXELS];
                    // SAFETY: `stored` holds 16 values.
                    unsafe {
                        _mm256_storeu_ps(stored.as_mut_ptr(), values[0]);
                        _mm256_storeu_ps(stored.as_mut_ptr().add(8), values[1]);
                    }
                    row.copy_from_slice(&stored[..count]);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{Tile, FILTERS, PIXELS};
    use crate::epilogue::Finish;
    use crate::simd::first_lanes;

    /// The sums of one output row for one tile of filters, each filter's `finish` but
    /// its GELU, SiLU or hard-swish applied as they are stored in `outputs` (a row per
    /// filter; an empty one for a filter past the last).
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn sums(
        tile: &Tile<'_>,
        finishes: &[Finish<'_>; FILTERS],
        outputs: &mut [&mut [f32]; FILTERS],
    ) {
        const VECTORS: usize = 2;
        const _: () = assert!(PIXELS == VECTORS * 16);
        let width = outputs[0].len();
        let clamp = finishes[0].epilogue.bounds();
        for start in (0..width).step_by(PIXELS) {
            let mut sums = [[_mm512_setzero_ps(); VECTORS]; FILTERS];
            for (&at, weights) in tile.taps.iter().zip(tile.weights.chunks_exact(FILTERS)) {
                let at = tile.base + at + start;
                let inputs = &tile.phases[at..at + PIXELS];
                // SAFETY: `inputs` holds PIXELS (32) values.
                let inputs: [__m512; VECTORS] = unsafe {
                    [
                        _mm512_loadu_ps(inputs.as_ptr()),
                        _mm512_loadu_ps(inputs.as_ptr().add(16)),
                    ]
                };
                for (sums, &weight) in sums.iter_mut().zip(weights) {
                    let weight = _mm512_set1_ps(weight);
                    for (sum, &input) in sums.iter_mut().zip(&inputs) {
                        *sum = _mm512_fmadd_ps(weight, input, *sum);
                    }
                }
            }
            for ((row, sums), finish) in outputs.iter_mut().zip(&sums).zip(finishes) {
                if row.is_empty() {
                    continue;
                }
                let (scale, shift) = (_mm512_set1_ps(finish.scale), _mm512_set1_ps(finish.shift));
                for (vector, &sum) in sums.iter().enumerate() {
                    let at = start + vector * 16;
                    if at >= width {
                        break;
                    }
                    let count = 16.min(width - at);
                    let mask = first_lanes(count);
                    let mut value = _mm512_fmadd_ps(sum, scale, shift);
                    if let Some(residual) = finish.residual {
                        let residual = &residual[at..at + count];
                        // SAFETY: the masked lanes are `residual`'s `count` values.
                        value = _mm512_add_ps(value, unsafe {
                            _mm512_maskz_loadu_ps(mask, residual.as_ptr())
                        });
                    }
                    if let Some((low, high)) = clamp {
                        value = _mm512_min_ps(
                            _mm512_max_ps(value, _mm512_set1_ps(low)),
                            _mm512_set1_ps(high),
                        );
                    }
                    let out = &mut row[at..at + count];
                    // SAFETY: the masked lanes are `out`'s `count` values.
                    unsafe { _mm512_mask_storeu_ps(out.as_mut_ptr(), mask, value) };
                }
            }
        }
    }
}
