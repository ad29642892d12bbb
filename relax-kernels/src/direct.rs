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
//!
//! The output may also be channel-blocked (`[N, F / 16, OH, OW, 16]`, see `blocked`), as
//! the blocked layers after a stem read it: then the vector lanes are a block's 16
//! filters, each input value is broadcast to them, and a pixel's 16 sums are stored
//! together, so that the stem's output needs no transform to blocks (MobileNetV2's took
//! 26 us a call after its 129 us stem).

use std::cell::RefCell;
use std::ops::Range;

use super::blocked::BLOCK;
use super::conv_operands::{finish_of, Conv2d, Operands, PerFilter};
use super::epilogue::Epilogue;
use super::parallel::{for_each_unit, Launch, Shared, INLINE_WORK};
use super::scratch::{prefix, reuse};
use super::simd::{mul_add, multiversion, Isa};

/// Filters summed together (their weights broadcast from one row of the packed kernel).
const FILTERS: usize = 8;

/// Output pixels summed together: two 16-lane vectors, so that 8 filters by 32 pixels
/// are 16 accumulators beside the inputs and weights (AVX-512 has 32 registers).
const PIXELS: usize = 32;

/// Output pixels the tiles of a blocked output's row sum together on AVX-512 (two blocks
/// by 12 are 24 accumulators; an odd last block is summed by 12 pixels too, so that the
/// compiler unrolls the loop that stores them and the sums stay in registers), a multiple
/// of [`PORTABLE_BLOCKED_PIXELS`]: phase rows are padded to whole tiles of both.
const BLOCKED_RUN: usize = 12;

/// Output pixels the portable tiles of a blocked output (AVX2's too) sum together: 6 by
/// a block of 16 filters are 12 of AVX2's 16 registers.
const PORTABLE_BLOCKED_PIXELS: usize = 6;
const _: () = assert!(BLOCKED_RUN.is_multiple_of(PORTABLE_BLOCKED_PIXELS));

/// The AVX-512 run of a blocked output's rows of at most this many pixels: a keyword
/// spotter's stem (10x4 over 49x10 MFCCs, stride 2) has rows of 5, of which runs of 12
/// would sum 7 pixels for nothing.
const NARROW_RUN: usize = PORTABLE_BLOCKED_PIXELS;

/// Input channels up to which [`computes`] takes a convolution onto an NCHW output (an
/// image's 1, 3 or 4; with more, im2col's matrix product is faster).
const MAX_CHANNELS: usize = 4;

/// ... and onto a blocked one: fewer than a block (a convolution of a whole block of
/// channels or more has a blocked input, or none of the blocked kernels), the vector
/// lanes being the filters. A DBNet's 1x1 layer of 8 to 32 channels over 240x240, one
/// core (`cargo bench -p relax-kernels -- "DBNet 1x1"`): 0.19 ms, against 0.23-0.32 for
/// the NCHW kernel, whose output the model then transformed to blocks.
const MAX_BLOCKED_CHANNELS: usize = BLOCK - 1;

/// Output pixels a row onto blocks needs at least: half a [`NARROW_RUN`], so that at
/// least half the sums made are kept (relax-build's `DIRECT_MIN_WIDTH` is the same).
const MIN_BLOCKED_WIDTH: usize = NARROW_RUN / 2;

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
/// input channels, or [`MAX_BLOCKED_CHANNELS`] onto a `blocked` output; output rows of at
/// least 16 pixels, or [`MIN_BLOCKED_WIDTH`] onto blocks; a CPU with AVX2 or AVX-512), and with which instructions; im2col (or
/// the blocked kernel, with the kernel in filter panels) does otherwise.
pub(crate) fn computes(shape: &Conv2d, output_width: usize, blocked: bool) -> Option<Isa> {
    let (max_channels, min_width) = if blocked {
        (MAX_BLOCKED_CHANNELS, MIN_BLOCKED_WIDTH)
    } else {
        (MAX_CHANNELS, PIXELS / 2)
    };
    let fits = shape.groups == 1
        && (1..=max_channels).contains(&shape.channels)
        && output_width >= min_width;
    let isa = Isa::best();
    (fits && isa != Isa::Portable).then_some(isa)
}

/// The OIHW kernel `[F, C, KH, KW]` as `[ceil(F / LANES), C * KH * KW, LANES]`: each
/// tap's weights of `LANES` filters side by side, zeros for the filters past `F`.
fn packed_kernel<const LANES: usize>(w: &[f32], filters: usize, depth: usize) -> Vec<f32> {
    let tiles = filters.div_ceil(LANES);
    let mut packed = vec![0f32; tiles * depth * LANES];
    for (filter, kernel) in w.chunks_exact(depth).enumerate() {
        let (tile, lane) = (filter / LANES, filter % LANES);
        for (tap, &weight) in kernel.iter().enumerate() {
            packed[(tile * depth + tap) * LANES + lane] = weight;
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
/// OIHW and `x` NCHW; `out` and `residual` NCHW, or channel-blocked (`blocked`:
/// `[N, F / 16, OH, OW, 16]`, see `blocked`); the sums made with the instructions of
/// `isa`.
///
/// # Safety
/// `x` holds `shape.batch * C * H * W` values, `w` `[F, C, KH, KW]`, `out` and `residual`
/// `N * F * OH * OW` values, `per_filter` a value per filter; all valid for the call, and
/// `out` overlaps none of the others. `shape.groups == 1`. `isa` one this CPU runs
/// ([`Isa::runs_here`]).
pub(crate) unsafe fn direct_conv(
    shape: &Conv2d,
    isa: Isa,
    blocked: bool,
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
    if blocked && !filters.is_multiple_of(BLOCK) {
        return Err(format!(
            "a direct convolution onto blocks of {BLOCK} channels needs whole blocks of filters, not {filters}"
        ));
    }
    // SAFETY: the caller's contract: `w` holds `F * C * KH * KW` values, read only.
    let w = unsafe { std::slice::from_raw_parts(w, filters * depth) };
    let (packed, run) = if blocked {
        (packed_kernel::<BLOCK>(w, filters, depth), BLOCKED_RUN)
    } else {
        (packed_kernel::<FILTERS>(w, filters, depth), PIXELS)
    };
    let band = BAND_ROWS.min(output_height.div_ceil(MIN_UNITS)).max(1);
    let bands = output_height.div_ceil(band);
    let layout = PhaseRows {
        rows: (band - 1) * stride_h + (kernel_h - 1) * dilation_h + 1,
        length: output_width.next_multiple_of(run) + (kernel_w - 1) * dilation_w / stride_w,
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
    let input_plane = shape.height * shape.width;
    let x = Shared(x.cast_mut());
    let sums = Sums {
        isa,
        filters,
        depth,
        output: (output_height, output_width),
        packed: &packed,
        per_filter,
        residual: residual.map(|residual| Shared(residual.cast_mut())),
        epilogue,
        out,
    };
    let work = shape.batch * output_height * output_width * filters * depth;
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
                let inputs = Inputs {
                    phases,
                    taps: &taps,
                    base: (oy - rows.start) * row_step,
                };
                // SAFETY: `rows` are this unit's alone (units are disjoint bands of
                // rows, each run once), and the caller's contract holds for `sums`.
                unsafe {
                    if blocked {
                        sums.blocked_row(image, oy, &inputs);
                    } else {
                        sums.nchw_row(image, oy, &rows, &inputs);
                    }
                }
            }
        });
    })
}

/// What every output row of a call reads, and where its sums go.
struct Sums<'a> {
    isa: Isa,
    filters: usize,
    /// Taps per filter, `C * KH * KW`.
    depth: usize,
    /// The output plane's height and width.
    output: (usize, usize),
    /// The kernel packed by [`packed_kernel`]: 8 filters a row (NCHW output) or 16 (a
    /// blocked one).
    packed: &'a [f32],
    per_filter: Option<PerFilter<'a>>,
    residual: Option<Shared>,
    epilogue: Epilogue,
    out: Shared,
}

impl Sums<'_> {
    /// Output row `oy` of image `image` onto NCHW planes, a tile of 8 filters at a time.
    ///
    /// # Safety
    /// As [`direct_conv`]'s, with NCHW `out` and `residual`; `oy` is in `rows`, which only
    /// this caller writes.
    unsafe fn nchw_row(&self, image: usize, oy: usize, rows: &Range<usize>, inputs: &Inputs<'_>) {
        let (filters, depth, isa, epilogue) = (self.filters, self.depth, self.isa, self.epilogue);
        let (output_height, output_width) = self.output;
        for (tile, weights) in self.packed.chunks_exact(depth * FILTERS).enumerate() {
            let first_filter = tile * FILTERS;
            let count = FILTERS.min(filters - first_filter);
            let row_of = |filter: usize| {
                ((image * filters + first_filter + filter) * output_height + oy) * output_width
            };
            let mut outputs: [&mut [f32]; FILTERS] = std::array::from_fn(|filter| {
                if filter < count {
                    // SAFETY: output row `oy` of this filter is this caller's alone,
                    // inside the checked `out`.
                    unsafe {
                        std::slice::from_raw_parts_mut(self.out.at(row_of(filter)), output_width)
                    }
                } else {
                    Default::default()
                }
            });
            let residuals: [&[f32]; FILTERS] = std::array::from_fn(|filter| match self.residual {
                // SAFETY: the residual's row `oy` of this filter, read only, inside the
                // checked `residual`.
                Some(residual) if filter < count => unsafe {
                    std::slice::from_raw_parts(
                        residual.at(row_of(filter)).cast_const(),
                        output_width,
                    )
                },
                _ => &[],
            });
            let finishes: [_; FILTERS] = std::array::from_fn(|filter| {
                let residual = self.residual.map(|_| residuals[filter]);
                finish_of(
                    self.per_filter,
                    (first_filter + filter).min(filters - 1),
                    residual,
                    epilogue,
                )
            });
            // The output rows this tile stores next (in a band's first row, this one
            // too), asked for now: inside a model they are out of the caches, and the
            // stores into 8 rows at once otherwise wait on each line. MobileNetV2's stem,
            // one core (`cargo bench -p relax-kernels -- "3->32"`, runs in turn): with the
            // caches evicted 0.35-0.39 ms before, 0.30-0.32 after; with them warm
            // 0.149-0.156 before, 0.159-0.162 after.
            #[cfg(target_arch = "x86_64")]
            {
                let first = if oy == rows.start { oy } else { oy + 1 };
                for prefetched in first..(oy + 2).min(rows.end) {
                    for filter in 0..count {
                        let start = row_of(filter) + (prefetched - oy) * output_width;
                        let row = self.out.at(start).cast_const();
                        for line in (0..output_width).step_by(super::caches::LINE_VALUES) {
                            // SAFETY: a hint only: a prefetch of any address is sound
                            // (these lie in this caller's output rows).
                            unsafe {
                                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                                    row.wrapping_add(line).cast(),
                                )
                            };
                        }
                    }
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = rows;
            // Whether the sums were finished as they were stored (but a GELU, SiLU or
            // hard-swish).
            let in_registers = match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => {
                    // SAFETY: the caller's contract: the CPU has AVX-512F.
                    unsafe { avx512::sums(inputs, weights, &finishes, &mut outputs) };
                    true
                }
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => {
                    // SAFETY: the caller's contract: the CPU has AVX2 and FMA.
                    unsafe { avx2::sums(inputs, weights, &finishes, &mut outputs) };
                    true
                }
                _ => {
                    portable_sums(inputs, weights, &mut outputs);
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

    /// Output row `oy` of image `image` onto blocks of 16 filters, each pixel's 16 stored
    /// together: on AVX-512, two blocks by 12 pixels at a time (an odd last block alone),
    /// each input broadcast to the 16 filters of both; elsewhere a block by
    /// [`PORTABLE_BLOCKED_PIXELS`] (the compiler's vectors).
    ///
    /// # Safety
    /// As [`direct_conv`]'s, with blocked `out` and `residual`; row `oy` of image `image`
    /// is this caller's alone.
    unsafe fn blocked_row(&self, image: usize, oy: usize, inputs: &Inputs<'_>) {
        let (output_height, output_width) = self.output;
        let blocks = self.filters / BLOCK;
        let row_values = output_width * BLOCK;
        let weights_size = self.depth * BLOCK;
        let row_of = |block: usize| ((image * blocks + block) * output_height + oy) * row_values;
        let block_of = |block: usize| {
            let filters = block * BLOCK..(block + 1) * BLOCK;
            OutputBlock {
                weights: &self.packed[block * weights_size..][..weights_size],
                scale: self
                    .per_filter
                    .and_then(|per_filter| per_filter.scale)
                    .map(|scale| &scale[filters.clone()]),
                shift: self.per_filter.map(|per_filter| &per_filter.shift[filters]),
                // SAFETY: the residual's row `oy` of this block, read only, inside the
                // checked `residual`.
                residual: self.residual.map(|residual| unsafe {
                    std::slice::from_raw_parts(residual.at(row_of(block)).cast_const(), row_values)
                }),
                // SAFETY: row `oy` of this block is this caller's alone, inside the
                // checked `out`.
                out: unsafe {
                    std::slice::from_raw_parts_mut(self.out.at(row_of(block)), row_values)
                },
            }
        };
        let clamp = self.epilogue.bounds();
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the caller's contract: the CPU has AVX-512F (the ISA is what
            // `computes` found), and as this function's.
            Isa::Avx512 if output_width <= NARROW_RUN => unsafe {
                self.blocked_runs::<NARROW_RUN>(blocks, output_width, &block_of, inputs, clamp)
            },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Isa::Avx512 => unsafe {
                self.blocked_runs::<BLOCKED_RUN>(blocks, output_width, &block_of, inputs, clamp)
            },
            _ => {
                for block in 0..blocks {
                    let mut one = block_of(block);
                    for start in (0..output_width).step_by(PORTABLE_BLOCKED_PIXELS) {
                        portable_blocked_sums(inputs, start, &mut one, clamp);
                    }
                }
            }
        }
        if self.epilogue.after_registers() {
            for block in 0..blocks {
                self.epilogue.apply(block_of(block).out);
            }
        }
    }

    /// The AVX-512 sums of [`Sums::blocked_row`]: two blocks by runs of `P` pixels at a
    /// time, an odd last block alone.
    ///
    /// # Safety
    /// The CPU has AVX-512F; as [`Sums::blocked_row`]'s.
    #[cfg(target_arch = "x86_64")]
    unsafe fn blocked_runs<'a, const P: usize>(
        &self,
        blocks: usize,
        output_width: usize,
        block_of: &dyn Fn(usize) -> OutputBlock<'a>,
        inputs: &Inputs<'_>,
        clamp: Option<(f32, f32)>,
    ) {
        for first in (0..blocks).step_by(2) {
            if first + 1 < blocks {
                let mut pair = [block_of(first), block_of(first + 1)];
                for start in (0..output_width).step_by(P) {
                    // SAFETY: the caller's contract: the CPU has AVX-512F.
                    unsafe { avx512::blocked_sums::<2, P>(inputs, start, &mut pair, clamp) };
                }
            } else {
                let mut last = [block_of(first)];
                for start in (0..output_width).step_by(P) {
                    // SAFETY: as above.
                    unsafe { avx512::blocked_sums::<1, P>(inputs, start, &mut last, clamp) };
                }
            }
        }
    }
}

/// Where one output row's sums read their inputs.
struct Inputs<'a> {
    /// The band's phase rows.
    phases: &'a [f32],
    /// Where each tap reads in the band's first output row.
    taps: &'a [usize],
    /// What to add to `taps` for this output row.
    base: usize,
}

/// One block of 16 filters of an output row, blocked: its packed kernel
/// `[C * KH * KW, 16]`, what its sums get (16 values each), and where they go
/// (`[OW, 16]`, as its residual).
struct OutputBlock<'a> {
    weights: &'a [f32],
    scale: Option<&'a [f32]>,
    shift: Option<&'a [f32]>,
    residual: Option<&'a [f32]>,
    out: &'a mut [f32],
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
    fn portable_sums(inputs: &Inputs<'_>, weights: &[f32], outputs: &mut [&mut [f32]; FILTERS]) {
        let width = outputs[0].len();
        for start in (0..width).step_by(PORTABLE_PIXELS) {
            let count = PORTABLE_PIXELS.min(width - start);
            for (part, outputs) in outputs.chunks_exact_mut(PORTABLE_FILTERS).enumerate() {
                if outputs[0].is_empty() {
                    break;
                }
                let mut sums = [[0f32; PORTABLE_PIXELS]; PORTABLE_FILTERS];
                for (&at, weights) in inputs.taps.iter().zip(weights.chunks_exact(FILTERS)) {
                    let at = inputs.base + at + start;
                    let values: &[f32; PORTABLE_PIXELS] = inputs.phases[at..at + PORTABLE_PIXELS]
                        .try_into()
                        .expect("PORTABLE_PIXELS values");
                    let weights: &[f32; PORTABLE_FILTERS] = weights
                        [part * PORTABLE_FILTERS..][..PORTABLE_FILTERS]
                        .try_into()
                        .expect("PORTABLE_FILTERS weights");
                    for filter in 0..PORTABLE_FILTERS {
                        for pixel in 0..PORTABLE_PIXELS {
                            sums[filter][pixel] += weights[filter] * values[pixel];
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

multiversion! {
    /// The sums of [`PORTABLE_BLOCKED_PIXELS`] pixels of an output row from `start` (fewer
    /// at the row's end) for one block of 16 filters, finished (scale and shift, residual,
    /// `clamp`) and stored; a GELU, SiLU or hard-swish is left to the caller.
    fn portable_blocked_sums<const FMA: bool>(
        inputs: &Inputs<'_>,
        start: usize,
        block: &mut OutputBlock<'_>,
        clamp: Option<(f32, f32)>,
    ) {
        const P: usize = PORTABLE_BLOCKED_PIXELS;
        let count = P.min(block.out.len() / BLOCK - start);
        let mut sums = [[0f32; BLOCK]; P];
        for (&at, weights) in inputs.taps.iter().zip(block.weights.chunks_exact(BLOCK)) {
            let at = inputs.base + at + start;
            let values: &[f32; P] = inputs.phases[at..at + P].try_into().expect("P values");
            for (sums, &value) in sums.iter_mut().zip(values) {
                for (sum, &weight) in sums.iter_mut().zip(weights) {
                    *sum = mul_add::<FMA>(weight, value, *sum);
                }
            }
        }
        for (pixel, sums) in sums.iter().enumerate().take(count) {
            let at = (start + pixel) * BLOCK;
            for (lane, &sum) in sums.iter().enumerate() {
                let scale = block.scale.map_or(1.0, |scale| scale[lane]);
                let shift = block.shift.map_or(0.0, |shift| shift[lane]);
                let mut value = sum * scale + shift;
                if let Some(residual) = block.residual {
                    value += residual[at + lane];
                }
                if let Some((low, high)) = clamp {
                    value = value.max(low).min(high);
                }
                block.out[at + lane] = value;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Inputs, FILTERS};
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
        inputs: &Inputs<'_>,
        weights: &[f32],
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
                for (&at, weights) in inputs.taps.iter().zip(weights.chunks_exact(FILTERS)) {
                    let at = inputs.base + at + start;
                    let values = &inputs.phases[at..at + PART_PIXELS];
                    // SAFETY: `values` holds 16 values.
                    let values = unsafe {
                        [
                            _mm256_loadu_ps(values.as_ptr()),
                            _mm256_loadu_ps(values.as_ptr().add(8)),
                        ]
                    };
                    let weights = &weights[part * PART_FILTERS..][..PART_FILTERS];
                    for (sums, &weight) in sums.iter_mut().zip(weights) {
                        let weight = _mm256_set1_ps(weight);
                        sums[0] = _mm256_fmadd_ps(weight, values[0], sums[0]);
                        sums[1] = _mm256_fmadd_ps(weight, values[1], sums[1]);
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

    use super::{Inputs, OutputBlock, BLOCK, FILTERS, PIXELS};
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
        inputs: &Inputs<'_>,
        weights: &[f32],
        finishes: &[Finish<'_>; FILTERS],
        outputs: &mut [&mut [f32]; FILTERS],
    ) {
        const VECTORS: usize = 2;
        const _: () = assert!(PIXELS == VECTORS * 16);
        let width = outputs[0].len();
        let clamp = finishes[0].epilogue.bounds();
        for start in (0..width).step_by(PIXELS) {
            let mut sums = [[_mm512_setzero_ps(); VECTORS]; FILTERS];
            for (&at, weights) in inputs.taps.iter().zip(weights.chunks_exact(FILTERS)) {
                let at = inputs.base + at + start;
                let values = &inputs.phases[at..at + PIXELS];
                // SAFETY: `values` holds PIXELS (32) values.
                let values: [__m512; VECTORS] = unsafe {
                    [
                        _mm512_loadu_ps(values.as_ptr()),
                        _mm512_loadu_ps(values.as_ptr().add(16)),
                    ]
                };
                for (sums, &weight) in sums.iter_mut().zip(weights) {
                    let weight = _mm512_set1_ps(weight);
                    for (sum, &input) in sums.iter_mut().zip(&values) {
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

    /// The sums of `P` pixels of an output row from `start` (fewer at the row's end) for
    /// `B` blocks of 16 filters, each input value broadcast to the blocks' filters,
    /// finished (scale and shift, residual, `clamp`) as they are stored; a GELU, SiLU or
    /// hard-swish is left to the caller.
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn blocked_sums<const B: usize, const P: usize>(
        inputs: &Inputs<'_>,
        start: usize,
        blocks: &mut [OutputBlock<'_>; B],
        clamp: Option<(f32, f32)>,
    ) {
        let count = P.min(blocks[0].out.len() / BLOCK - start);
        let mut sums = [[_mm512_setzero_ps(); P]; B];
        for (tap, &at) in inputs.taps.iter().enumerate() {
            let at = inputs.base + at + start;
            let values: &[f32; P] = inputs.phases[at..at + P].try_into().expect("P values");
            let mut weights = [_mm512_setzero_ps(); B];
            for (weights, block) in weights.iter_mut().zip(blocks.iter()) {
                let row = &block.weights[tap * BLOCK..][..BLOCK];
                // SAFETY: `row` holds 16 values.
                *weights = unsafe { _mm512_loadu_ps(row.as_ptr()) };
            }
            for (pixel, &value) in values.iter().enumerate() {
                let value = _mm512_set1_ps(value);
                for (sums, &weights) in sums.iter_mut().zip(&weights) {
                    sums[pixel] = _mm512_fmadd_ps(weights, value, sums[pixel]);
                }
            }
        }
        for (block, sums) in blocks.iter_mut().zip(&sums) {
            let scale = match block.scale {
                // SAFETY: the slice holds 16 values.
                Some(scale) => unsafe { _mm512_loadu_ps(scale[..BLOCK].as_ptr()) },
                None => _mm512_set1_ps(1.0),
            };
            let shift = match block.shift {
                // SAFETY: as above.
                Some(shift) => unsafe { _mm512_loadu_ps(shift[..BLOCK].as_ptr()) },
                None => _mm512_setzero_ps(),
            };
            // (All `P` by a constant count, which the compiler unrolls for 12, so that the
            // sums stay in registers above: with 24, it kept them in memory too.)
            for (pixel, &sum) in sums.iter().enumerate() {
                if pixel >= count {
                    break;
                }
                let at = (start + pixel) * BLOCK;
                let mut value = _mm512_fmadd_ps(sum, scale, shift);
                if let Some(residual) = block.residual {
                    let residual = &residual[at..at + BLOCK];
                    // SAFETY: `residual` holds 16 values.
                    value = _mm512_add_ps(value, unsafe { _mm512_loadu_ps(residual.as_ptr()) });
                }
                if let Some((low, high)) = clamp {
                    value = _mm512_min_ps(
                        _mm512_max_ps(value, _mm512_set1_ps(low)),
                        _mm512_set1_ps(high),
                    );
                }
                let out = &mut block.out[at..at + BLOCK];
                // SAFETY: `out` holds 16 values.
                unsafe { _mm512_storeu_ps(out.as_mut_ptr(), value) };
            }
        }
    }
}
