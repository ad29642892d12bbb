//! Depthwise convolutions on channel-blocked tensors (`[N, C/16, H, W, 16]`): the 3x3
//! and 5x5 layers of MobileNets and EfficientNets between their blocked pointwise
//! layers, so that such a network stays blocked end to end (as onnxruntime's NCHWc path
//! runs it) instead of changing layout around every depthwise layer.
//!
//! Blocked, the 16 channels of a pixel are one vector and each channel has a filter of
//! its own: an output pixel's 16 values are the sum over the kernel's taps of the tap's
//! 16 weights times an input pixel's 16 values, lane by lane. A unit of work is a band
//! of output rows of one block of channels (a whole plane at 7x7 or 14x14, 8 rows at
//! 56x56). The units go band by band, so that each task's share is a band of rows
//! across the blocks, as the stem and a blocked convolution of up to 64 filters split
//! their outputs: a task then reads mostly what its own core wrote (MobileNetV2, 2
//! threads, `RELAX_PROFILE=shapes`, four runs of each in turn: its convolutions took
//! 1437-1467 us a call against 1476-1517 with the units block by block, the whole model
//! 2040-2112 against 2101-2134). A row's interior pixels (all of whose taps fall inside
//! the input row) are summed 8 at a time in registers, each tap's weight vector loaded
//! once for the 8 (with AVX-512 and a 3- or 5-wide kernel at stride 1, also each input
//! vector once for the pixels that read it), and the 1-7 left over as one last run; the
//! pixels at the row's ends skip the taps that fall in the padding, as every pixel
//! skips the kernel rows that do (with AVX-512 and a 3- or 5-wide kernel at stride 1,
//! the runs cover the whole row, the columns in the padding skipped as zeros). Against
//! units of one row, single pixels after the runs and the row's ends on the portable
//! path, one thread, in one process: 0.54x the
//! time on MobileNetV2's 14x14 and 7x7 layers, 0.66x on EfficientNet-B0's 5x5 one at
//! 28x28 and 0.71-0.88x on the 56x56 to 112x112 ones. The per-channel scale and shift,
//! the residual and a clamp are applied as the sums are stored; a GELU or SiLU to the
//! stored row.
//!
//! The kernel comes OIHW, `[C, 1, KH, KW]`, and each unit regroups its block's into
//! `[KH, KW, 16]`: 9 values a channel for a 3x3 kernel, nothing beside the convolution
//! (regrouping the whole kernel before the units started was a part no thread shared).

use std::ops::Range;

use super::blocked::BLOCK;
use super::conv_operands::{Conv2d, Operands};
use super::edges::inside_columns;
use super::parallel::{for_each_unit, Launch, Shared, INLINE_WORK};
use super::scratch::{prefix, reuse};
use super::simd::{multiversion, Isa};

/// Output pixels summed together in registers: 8 accumulators of 16 lanes beside a
/// weight vector and the inputs (AVX-512 has 32 vector registers).
const PIXELS: usize = 8;

/// Vector multiply-adds a unit of work takes at least (whole output rows; a plane at
/// most).
const UNIT_WORK: usize = 2048;

/// One pixel's values of one block of channels.
type Lanes = [f32; BLOCK];

/// The sizes of the convolution that every row shares.
#[derive(Debug)]
struct Geometry {
    height: usize,
    width: usize,
    output_width: usize,
    kernel: (usize, usize),
    stride: (usize, usize),
    dilation: (usize, usize),
    /// Top, left.
    padding: (usize, usize),
    /// The output columns all of whose taps fall inside the input row.
    interior: Range<usize>,
}

impl Geometry {
    fn of(shape: &Conv2d, output_width: usize) -> Geometry {
        let mut interior = 0..output_width;
        for kx in 0..shape.kernel.1 {
            let x0 = (kx * shape.dilation.1) as isize - shape.padding.1 as isize;
            let (low, high) = inside_columns(x0, shape.stride.1, shape.width, output_width);
            interior = interior.start.max(low)..interior.end.min(high);
        }
        // Empty when no column has all its taps inside (a kernel wider than the row).
        let interior = interior.start..interior.end.max(interior.start);
        Geometry {
            height: shape.height,
            width: shape.width,
            output_width,
            kernel: shape.kernel,
            stride: shape.stride,
            dilation: shape.dilation,
            padding: (shape.padding.0, shape.padding.1),
            interior,
        }
    }

    /// The kernel rows whose input row (for output row `oy`) falls inside the input.
    fn rows_inside(&self, oy: usize) -> Range<usize> {
        let y0 = (oy * self.stride.0) as isize - self.padding.0 as isize;
        let (low, high) = inside_columns(y0, self.dilation.0, self.height, self.kernel.0);
        low..high.max(low)
    }

    /// The input row of kernel row `ky` for output row `oy` (inside, see `rows_inside`).
    fn input_row(&self, oy: usize, ky: usize) -> usize {
        oy * self.stride.0 + ky * self.dilation.0 - self.padding.0
    }

    /// The input column of kernel column `kx` for output column `ox`, if inside.
    fn input_column(&self, ox: usize, kx: usize) -> Option<usize> {
        (ox * self.stride.1 + kx * self.dilation.1)
            .checked_sub(self.padding.1)
            .filter(|&column| column < self.width)
    }

    /// The taps of output pixel `(oy, ox)` that fall inside the input, as (the tap's
    /// first weight, its input pixel's first value) in a block's kernel and plane: what
    /// a pixel at a row's end sums.
    fn edge_taps(&self, oy: usize, ox: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.rows_inside(oy).flat_map(move |ky| {
            let row = self.input_row(oy, ky) * self.width;
            (0..self.kernel.1).filter_map(move |kx| {
                let column = self.input_column(ox, kx)?;
                Some(((ky * self.kernel.1 + kx) * BLOCK, (row + column) * BLOCK))
            })
        })
    }
}

/// What one block of channels reads and applies.
struct Block<'a> {
    /// The block's input plane, `[H, W, 16]`.
    input: &'a [f32],
    /// The block's kernel, `[KH * KW, 16]`.
    weights: &'a [f32],
    scale: &'a Lanes,
    shift: &'a Lanes,
    clamp: Option<(f32, f32)>,
}

/// `out = epilogue(depthwise_conv2d(x, w) * scale + shift + residual)` with `x`, `out`
/// and `residual` channel-blocked and `w` OIHW (`[C, 1, KH, KW]`); the rows summed with
/// the instructions of `isa`.
///
/// # Safety
/// `x` holds `shape.batch` blocked images of `shape.channels` channels (a multiple of
/// 16), `w` `[C, 1, KH, KW]`, `out` and `residual` `[N, C / 16, OH, OW, 16]`,
/// `per_filter` a value per channel; all valid for the call, and `out` overlaps none of
/// the others. `shape.groups == shape.channels == shape.filters`. `isa`
/// a kind this CPU runs ([`Isa::runs_here`]).
pub(crate) unsafe fn blocked_depthwise(
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
    let geometry = Geometry::of(shape, output_width);
    let channels = shape.channels;
    let blocks = channels / BLOCK;
    let taps = shape.kernel.0 * shape.kernel.1;
    // SAFETY: the caller's contract: `w` holds `C * KH * KW` values, read only.
    let w = unsafe { std::slice::from_raw_parts(w, channels * taps) };
    let (input_plane, output_row) = (shape.height * shape.width * BLOCK, output_width * BLOCK);
    let x = Shared(x.cast_mut());
    let residual = residual.map(|residual| Shared(residual.cast_mut()));
    // Rows of a unit: enough multiply-adds that taking a unit costs little beside it
    // (a 7x7 or 14x14 plane is one unit, a 56x56 one 7).
    let band = UNIT_WORK
        .div_ceil((output_width * taps).max(1))
        .clamp(1, output_height.max(1));
    let bands = output_height.div_ceil(band);
    let units = shape.batch * blocks * bands;
    let work = shape.batch * blocks * output_height * output_row * taps;
    for_each_unit(launch, work < INLINE_WORK, units, &|unit| {
        // Band by band (see the module's doc).
        let (image, rest) = (unit / (bands * blocks), unit % (bands * blocks));
        let (band_index, block) = (rest / blocks, rest % blocks);
        let plane = image * blocks + block;
        let rows = band_index * band..((band_index + 1) * band).min(output_height);
        let lanes = |values: Option<&[f32]>, default: f32| -> Lanes {
            values.map_or([default; BLOCK], |values| {
                values[block * BLOCK..][..BLOCK]
                    .try_into()
                    .expect("a block of values")
            })
        };
        let scale = lanes(per_filter.and_then(|per_filter| per_filter.scale), 1.0);
        let shift = lanes(per_filter.map(|per_filter| per_filter.shift), 0.0);
        let weights = block_kernel(w, block, taps);
        let first_row = plane * output_height + rows.start;
        let band_values = rows.len() * output_row;
        // SAFETY: input plane `plane` (image `plane / blocks`, block `plane % blocks`)
        // and the residual's rows, read only; the band's output rows are this unit's
        // alone (`for_each_unit` runs each unit once, and bands do not overlap). Offsets
        // are inside the checked tensors.
        let (input, band_out, residual) = unsafe {
            (
                std::slice::from_raw_parts(x.at(plane * input_plane).cast_const(), input_plane),
                std::slice::from_raw_parts_mut(out.at(first_row * output_row), band_values),
                residual.map(|residual| {
                    std::slice::from_raw_parts(
                        residual.at(first_row * output_row).cast_const(),
                        band_values,
                    )
                }),
            )
        };
        // Output row `oy` of the band is row `oy - first_oy` of `geometry` over `input`.
        let mut sum_band = |geometry: &Geometry, input: &[f32], first_oy: usize| {
            let block = Block {
                input,
                weights: &weights,
                scale: &scale,
                shift: &shift,
                clamp: epilogue.bounds(),
            };
            for (index, row) in band_out.chunks_exact_mut(output_row).enumerate() {
                let oy = rows.start + index - first_oy;
                let residual =
                    residual.map(|residual| &residual[index * output_row..][..output_row]);
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: the caller's contract: the CPU has AVX-512F.
                    Isa::Avx512 => unsafe { avx512::row(geometry, oy, &block, residual, row) },
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: the caller's contract: the CPU has AVX2 and FMA.
                    Isa::Avx2 => unsafe { avx2::row(geometry, oy, &block, residual, row) },
                    _ => block_row(geometry, oy, &block, residual, row),
                }
                if epilogue.after_registers() {
                    epilogue.apply(row);
                }
            }
        };
        let copied = if isa == Isa::Avx512 && whole_row_width(&geometry).is_some() {
            None
        } else {
            PaddedRows::of(shape, &geometry, &rows)
        };
        match copied {
            Some(padded) => reuse(&PADDED, |buffer| {
                let copy = prefix(buffer, padded.values);
                padded.fill(shape, input, copy);
                sum_band(&padded.geometry, copy, rows.start);
            }),
            None => sum_band(&geometry, input, 0),
        }
    })
}

/// The width of the kernel, for the undilated 3- and 5-wide kernels at stride 1, whose
/// rows AVX-512 sums whole in runs, the input columns in the padding taken as zeros in
/// registers (`avx512::runs`), so that they need no padded copy (see [`PaddedRows`]).
/// Against the copy (and the pixels at a row's ends one by one where there was none),
/// one core, AMD Zen 4, three runs of each in turn (`cargo bench -p relax-kernels --bench
/// layers -- dw`): MobileNetV2's 3x3 layers took 0.71-0.74x the time over 14x14 and 7x7,
/// 0.76x over 56x56 and 0.82x over 112x112; EfficientNet-B0's 5x5 layer over 28x28 0.73x.
fn whole_row_width(geometry: &Geometry) -> Option<usize> {
    match (geometry.kernel.1, geometry.stride.1, geometry.dilation.1) {
        (width @ (3 | 5), 1, 1) => Some(width),
        _ => None,
    }
}

thread_local! {
    /// The zero-padded input rows of the units run on this thread (see [`PaddedRows`]).
    static PADDED: std::cell::RefCell<Vec<f32>> = std::cell::RefCell::default();
}

/// A band of output rows summed from a zero-padded copy of the input rows it reads:
/// every output pixel is then interior, all its taps inside. In place, the pixels at a
/// row's ends sum their taps inside one by one (2 of a 7-pixel row's 7, 4 of a 28-pixel
/// row's 28 for a 5x5 kernel), and each output row skips the kernel rows in the padding.
/// Against in place (and the whole kernel regrouped first), in MobileNetV2, 2 threads,
/// alternating runs: 0.64-0.82x the time on its 14x14 and 7x7 layers. Copying costs a
/// load and a store per input value beside the taps' multiply-adds: rows with fewer than
/// one edge pixel in [`COPIED_EDGES`] stay in place (MobileNetV2's 3x3 layer over 28x28
/// took about as long either way), as do strided convolutions (4 input values an output
/// pixel at stride 2: MobileNetV2's stride-2 layers over 56x56 and 28x28 planes took
/// 1.3-1.5x the time copied). AVX-512's rows of 3- and 5-wide kernels at stride 1 need
/// no copy (see [`whole_row_width`]).
struct PaddedRows {
    /// The convolution's over the copied rows (no padding).
    geometry: Geometry,
    /// The input row of the copy's first (negative: in the top padding).
    first: isize,
    /// Values of the copy.
    values: usize,
}

/// Output rows of which at least one pixel in this many is at an edge (a 3x3 kernel's
/// rows up to 16 wide, a 5x5's up to 32) are summed from a padded copy (see
/// [`PaddedRows`]).
const COPIED_EDGES: usize = 8;

/// The most values of a padded copy (256 KiB).
const MAX_PADDED_VALUES: usize = 64 * 1024;

impl PaddedRows {
    /// The padded copy of the input rows that output rows `rows` read, if `shape` has
    /// padding and a stride of 1, its output rows enough edge pixels (`geometry`: in
    /// place) and the copy is not too large.
    fn of(shape: &Conv2d, geometry: &Geometry, rows: &Range<usize>) -> Option<PaddedRows> {
        let output_width = geometry.output_width;
        let edges = output_width - geometry.interior.len();
        let (top, left, bottom, right) = shape.padding;
        if (top, left, bottom, right) == (0, 0, 0, 0)
            || shape.stride != (1, 1)
            || edges * COPIED_EDGES < output_width
            || rows.is_empty()
        {
            return None;
        }
        // The input rows from the first output row's first tap to the last one's last
        // (inside the padded input: `shape.output()` checked these sizes).
        let span = (shape.kernel.0 - 1) * shape.dilation.0 + 1;
        let height = (rows.len() - 1) * shape.stride.0 + span;
        let width = shape.width + left + right;
        let values = height.checked_mul(width)?.checked_mul(BLOCK)?;
        let copied = Conv2d {
            height,
            width,
            padding: (0, 0, 0, 0),
            ..*shape
        };
        (values <= MAX_PADDED_VALUES).then(|| PaddedRows {
            geometry: Geometry::of(&copied, output_width),
            first: (rows.start * shape.stride.0) as isize - top as isize,
            values,
        })
    }

    /// Copies the rows from one block's input plane (`[H, W, 16]`) into `copy`, zeros
    /// around them.
    fn fill(&self, shape: &Conv2d, input: &[f32], copy: &mut [f32]) {
        let left = shape.padding.1 * BLOCK;
        let source_row = shape.width * BLOCK;
        for (index, row) in copy
            .chunks_exact_mut(self.geometry.width * BLOCK)
            .enumerate()
        {
            let y = self.first + index as isize;
            if y < 0 || y as usize >= shape.height {
                row.fill(0.0);
                continue;
            }
            let (before, rest) = row.split_at_mut(left);
            before.fill(0.0);
            let (values, after) = rest.split_at_mut(source_row);
            values.copy_from_slice(&input[y as usize * source_row..][..source_row]);
            after.fill(0.0);
        }
    }
}

/// Block `block` of the OIHW kernel `[C, 1, KH, KW]`, as `[KH * KW, 16]`.
fn block_kernel(w: &[f32], block: usize, taps: usize) -> Vec<f32> {
    let mut grouped = vec![0.0; taps * BLOCK];
    for (lane, filter) in w[block * BLOCK * taps..][..BLOCK * taps]
        .chunks_exact(taps)
        .enumerate()
    {
        for (tap, &weight) in filter.iter().enumerate() {
            grouped[tap * BLOCK + lane] = weight;
        }
    }
    grouped
}

multiversion! {
    /// Output row `oy` of one block of channels into `out` (`[OW, 16]`), finished (but
    /// a GELU or SiLU).
    fn block_row(
        geometry: &Geometry,
        oy: usize,
        block: &Block<'_>,
        residual: Option<&[f32]>,
        out: &mut [f32],
    ) {
        let rows = geometry.rows_inside(oy);
        let interior = geometry.interior.clone();
        let mut ox = interior.start;
        while ox + PIXELS <= interior.end {
            let sums = interior_sums::<PIXELS>(geometry, oy, ox, rows.clone(), block);
            for (pixel, sums) in sums.iter().enumerate() {
                store(sums, block, residual, out, ox + pixel);
            }
            ox += PIXELS;
        }
        for ox in ox..interior.end {
            let [sums] = interior_sums::<1>(geometry, oy, ox, rows.clone(), block);
            store(&sums, block, residual, out, ox);
        }
        edge_pixels(geometry, oy, block, residual, out);
    }
}

/// The pixels of output row `oy` outside the interior, summed over the taps inside the
/// input and stored.
#[inline(always)]
fn edge_pixels(
    geometry: &Geometry,
    oy: usize,
    block: &Block<'_>,
    residual: Option<&[f32]>,
    out: &mut [f32],
) {
    let interior = &geometry.interior;
    for ox in (0..interior.start).chain(interior.end..geometry.output_width) {
        let sums = edge_sums(geometry, oy, ox, block);
        store(&sums, block, residual, out, ox);
    }
}

/// The sums of the `P` interior output pixels from column `ox` over the kernel rows
/// `rows`.
#[inline(always)]
fn interior_sums<const P: usize>(
    geometry: &Geometry,
    oy: usize,
    ox: usize,
    rows: Range<usize>,
    block: &Block<'_>,
) -> [Lanes; P] {
    let mut sums = [[0f32; BLOCK]; P];
    let pixel_step = geometry.stride.1 * BLOCK;
    for ky in rows {
        let row = geometry.input_row(oy, ky) * geometry.width;
        for kx in 0..geometry.kernel.1 {
            let tap = ky * geometry.kernel.1 + kx;
            let weights: &Lanes = block.weights[tap * BLOCK..][..BLOCK]
                .try_into()
                .expect("a tap's weights");
            let first = ox * geometry.stride.1 + kx * geometry.dilation.1 - geometry.padding.1;
            let start = (row + first) * BLOCK;
            for (pixel, sums) in sums.iter_mut().enumerate() {
                let input: &Lanes = block.input[start + pixel * pixel_step..][..BLOCK]
                    .try_into()
                    .expect("a pixel's values");
                for lane in 0..BLOCK {
                    sums[lane] += input[lane] * weights[lane];
                }
            }
        }
    }
    sums
}

/// The sums of output pixel `ox` (at a row's end) over the taps inside the input.
#[inline(always)]
fn edge_sums(geometry: &Geometry, oy: usize, ox: usize, block: &Block<'_>) -> Lanes {
    let mut sums = [0f32; BLOCK];
    for (tap, at) in geometry.edge_taps(oy, ox) {
        let weights = &block.weights[tap..][..BLOCK];
        let input = &block.input[at..][..BLOCK];
        for lane in 0..BLOCK {
            sums[lane] += input[lane] * weights[lane];
        }
    }
    sums
}

/// `sums * scale + shift + residual`, clamped, stored as output pixel `ox` of `out`.
#[inline(always)]
fn store(sums: &Lanes, block: &Block<'_>, residual: Option<&[f32]>, out: &mut [f32], ox: usize) {
    let out: &mut Lanes = (&mut out[ox * BLOCK..][..BLOCK])
        .try_into()
        .expect("a pixel's values");
    for lane in 0..BLOCK {
        out[lane] = sums[lane] * block.scale[lane] + block.shift[lane];
    }
    if let Some(residual) = residual {
        let residual = &residual[ox * BLOCK..][..BLOCK];
        for lane in 0..BLOCK {
            out[lane] += residual[lane];
        }
    }
    if let Some((low, high)) = block.clamp {
        // `f32::max` then `min`, as the other kernels clamp: a NaN becomes `low`.
        for value in out.iter_mut() {
            *value = value.max(low).min(high);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{edge_sums, store, Block, Geometry, BLOCK};

    /// Output pixels summed together: 4 x 2 vector accumulators beside a tap's 2 weight
    /// vectors (AVX2 has 16 registers).
    const PIXELS: usize = 4;

    /// A pixel's 16 values as two vectors of 8.
    type Pair = [__m256; 2];

    /// Output row `oy` of one block of channels into `out` (`[OW, 16]`), finished as
    /// [`super::store`] does (but a GELU or SiLU): the interior in runs of 4 pixels and a
    /// last run of the 1-3 left, then each pixel at the row's ends (the portable sums).
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn row(
        geometry: &Geometry,
        oy: usize,
        block: &Block<'_>,
        residual: Option<&[f32]>,
        out: &mut [f32],
    ) {
        let interior = geometry.interior.clone();
        let mut ox = interior.start;
        while ox + PIXELS <= interior.end {
            let sums = run::<PIXELS>(geometry, oy, ox, block);
            finish(&sums, ox, block, residual, out);
            ox += PIXELS;
        }
        match interior.end - ox {
            1 => finish(&run::<1>(geometry, oy, ox, block), ox, block, residual, out),
            2 => finish(&run::<2>(geometry, oy, ox, block), ox, block, residual, out),
            3 => finish(&run::<3>(geometry, oy, ox, block), ox, block, residual, out),
            _ => {}
        }
        for ox in (0..interior.start).chain(interior.end..geometry.output_width) {
            store(
                &edge_sums(geometry, oy, ox, block),
                block,
                residual,
                out,
                ox,
            );
        }
    }

    /// The sums of the `P` interior pixels from column `ox` of output row `oy`: each tap's
    /// weight vectors loaded once for the `P`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn run<const P: usize>(
        geometry: &Geometry,
        oy: usize,
        ox: usize,
        block: &Block<'_>,
    ) -> [Pair; P] {
        let mut sums = [[_mm256_setzero_ps(); 2]; P];
        let step = geometry.stride.1 * BLOCK;
        for ky in geometry.rows_inside(oy) {
            let row = geometry.input_row(oy, ky) * geometry.width;
            for kx in 0..geometry.kernel.1 {
                let tap = ky * geometry.kernel.1 + kx;
                let first = ox * geometry.stride.1 + kx * geometry.dilation.1 - geometry.padding.1;
                let weights = &block.weights[tap * BLOCK..][..BLOCK];
                // The run's inputs for this tap: interior pixels read inside the row.
                let inputs = &block.input[(row + first) * BLOCK..][..(P - 1) * step + BLOCK];
                // SAFETY: 16 values each, inside the slices just taken.
                unsafe {
                    let low = _mm256_loadu_ps(weights.as_ptr());
                    let high = _mm256_loadu_ps(weights.as_ptr().add(8));
                    for (pixel, sums) in sums.iter_mut().enumerate() {
                        let values = inputs.as_ptr().add(pixel * step);
                        sums[0] = _mm256_fmadd_ps(_mm256_loadu_ps(values), low, sums[0]);
                        sums[1] = _mm256_fmadd_ps(_mm256_loadu_ps(values.add(8)), high, sums[1]);
                    }
                }
            }
        }
        sums
    }

    /// `sums * scale + shift + residual`, clamped, stored as output pixels `ox..` of
    /// `out`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn finish<const P: usize>(
        sums: &[Pair; P],
        ox: usize,
        block: &Block<'_>,
        residual: Option<&[f32]>,
        out: &mut [f32],
    ) {
        for half in 0..2 {
            // SAFETY: 8 values each, inside the block's 16.
            let (scale, shift) = unsafe {
                (
                    _mm256_loadu_ps(block.scale.as_ptr().add(half * 8)),
                    _mm256_loadu_ps(block.shift.as_ptr().add(half * 8)),
                )
            };
            for (pixel, sums) in sums.iter().enumerate() {
                let at = (ox + pixel) * BLOCK + half * 8;
                let mut value = _mm256_fmadd_ps(sums[half], scale, shift);
                if let Some(residual) = residual {
                    let residual = &residual[at..][..8];
                    // SAFETY: 8 values of this pixel, read only.
                    value = _mm256_add_ps(value, unsafe { _mm256_loadu_ps(residual.as_ptr()) });
                }
                if let Some((low, high)) = block.clamp {
                    // max then min with the value first, as `f32::max` and `min`: a NaN
                    // becomes `low`.
                    value = _mm256_min_ps(
                        _mm256_max_ps(value, _mm256_set1_ps(low)),
                        _mm256_set1_ps(high),
                    );
                }
                let out = &mut out[at..][..8];
                // SAFETY: 8 values of this pixel.
                unsafe { _mm256_storeu_ps(out.as_mut_ptr(), value) };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{whole_row_width, Block, Geometry, BLOCK, PIXELS};

    /// Output row `oy` of one block of channels into `out` (`[OW, 16]`), finished as
    /// [`super::store`] does (but a GELU or SiLU): in runs of 8 pixels with 8 vector
    /// accumulators and a last run of the 1-7 left, the whole row for the undilated 3-
    /// and 5-wide kernels at stride 1 (see [`whole_row_width`]), else the interior's,
    /// then each pixel at the row's ends over the taps inside the input.
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn row(
        geometry: &Geometry,
        oy: usize,
        block: &Block<'_>,
        residual: Option<&[f32]>,
        out: &mut [f32],
    ) {
        let strided_3x3 = (geometry.kernel.1, geometry.stride.1, geometry.dilation.1) == (3, 2, 1);
        match whole_row_width(geometry) {
            Some(3) => runs::<3, 1>(geometry, oy, block, residual, out),
            Some(5) => runs::<5, 1>(geometry, oy, block, residual, out),
            _ if strided_3x3 => runs::<3, 2>(geometry, oy, block, residual, out),
            _ => runs::<0, 0>(geometry, oy, block, residual, out),
        }
    }

    /// [`row`] with the runs of [`run`]`::<P, K, S>`: `K` and `S` the width and stride
    /// of an undilated kernel known when compiled (at stride 1, the runs cover the whole
    /// row), 0 and 0 for any other kernel. (Each `K` and `S` have instances of their own
    /// of `run` and `finish`, each called from one place, so that the compiler inlines
    /// them all and the sums stay in registers; with instances shared by the kernels,
    /// `finish` was a call and the stride-2 layers took 1.04-1.1x the time. The 3x3
    /// kernel at stride 2, known when compiled, took 0.91-0.92x the time of the generic
    /// runs on MobileNetV2's layers over 112x112 and 56x56 (one core, AMD Zen 4); the
    /// 5x5 one at stride 2, 1.03x on EfficientNet-B0's layer over 28x28, stays generic.)
    #[target_feature(enable = "avx512f")]
    fn runs<const K: usize, const S: usize>(
        geometry: &Geometry,
        oy: usize,
        block: &Block<'_>,
        residual: Option<&[f32]>,
        out: &mut [f32],
    ) {
        let interior = if S == 1 {
            0..geometry.output_width
        } else {
            geometry.interior.clone()
        };
        let mut ox = interior.start;
        while ox + PIXELS <= interior.end {
            let sums = run::<PIXELS, K, S>(geometry, oy, ox, block);
            finish::<PIXELS, K, S>(&sums, ox, block, residual, out);
            ox += PIXELS;
        }
        macro_rules! last_run {
            ($($pixels:literal)*) => {
                match interior.end - ox {
                    $($pixels => finish::<$pixels, K, S>(&run::<$pixels, K, S>(geometry, oy, ox, block), ox, block, residual, out),)*
                    _ => {}
                }
            };
        }
        last_run!(1 2 3 4 5 6 7);
        for ox in (0..interior.start).chain(interior.end..geometry.output_width) {
            let sums = edge(geometry, oy, ox, block);
            finish::<1, K, S>(&[sums], ox, block, residual, out);
        }
    }

    /// The sums of the `P` pixels from column `ox` of output row `oy` (interior pixels
    /// but at stride `S` = 1): for the undilated kernels `K` = 3 or 5 wide at stride 1
    /// (MobileNets', EfficientNets'), [`shared_inputs`], masked at the row's ends;
    /// else each tap's weight vector loaded once for the `P`. (At
    /// stride 2, where an input vector serves at most 2 pixels, the same sums took 1.3x
    /// the time on MobileNetV2's 112x112 layer, and their instances beside the stride-1
    /// ones slowed those too: `cargo bench -p relax-kernels -- dw`, one core.)
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn run<const P: usize, const K: usize, const S: usize>(
        geometry: &Geometry,
        oy: usize,
        ox: usize,
        block: &Block<'_>,
    ) -> [__m512; P] {
        if S == 1 {
            let inside = geometry.interior.start <= ox && ox + P <= geometry.interior.end;
            return if inside {
                shared_inputs::<P, K, false>(geometry, oy, ox, block)
            } else {
                shared_inputs::<P, K, true>(geometry, oy, ox, block)
            };
        }
        let (width, stride) = if S == 0 {
            (geometry.kernel.1, geometry.stride.1)
        } else {
            (K, S)
        };
        let mut sums = [_mm512_setzero_ps(); P];
        let step = stride * BLOCK;
        for ky in geometry.rows_inside(oy) {
            let row = geometry.input_row(oy, ky) * geometry.width;
            for kx in 0..width {
                let tap = ky * width + kx;
                let first = ox * stride + kx * geometry.dilation.1 - geometry.padding.1;
                let weights = &block.weights[tap * BLOCK..][..BLOCK];
                // The run's inputs for this tap: interior pixels read inside the row.
                let inputs = &block.input[(row + first) * BLOCK..][..(P - 1) * step + BLOCK];
                // SAFETY: 16 values each, inside the slices just taken.
                unsafe {
                    let weight = _mm512_loadu_ps(weights.as_ptr());
                    for (pixel, sum) in sums.iter_mut().enumerate() {
                        let value = _mm512_loadu_ps(inputs.as_ptr().add(pixel * step));
                        *sum = _mm512_fmadd_ps(value, weight, *sum);
                    }
                }
            }
        }
        sums
    }

    /// [`run`] for a kernel `K` columns wide at stride 1, undilated: each input vector of
    /// a kernel row is loaded once, for every pixel of the run that reads it (up to `K`),
    /// beside the row's `K` weight vectors; with `MASKED` (a run at a row's end), the
    /// input columns outside the row, in the padding, are zeros and skipped. A 3x3
    /// kernel loads 13 vectors a kernel row for 8 pixels' 24 multiply-adds, against 27
    /// tap by tap: the loads, not the multiply-adds, bound a depthwise layer. One core,
    /// AMD Zen 5, two runs in turn against tap by tap: MobileNetV2's 3x3 layers took
    /// 0.62-0.66x the time at 112x112, 0.90-0.92x at 56x56, 0.85-0.92x at 14x14 and 7x7;
    /// EfficientNet-B0's 5x5 layer at 28x28 0.74-0.76x.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn shared_inputs<const P: usize, const K: usize, const MASKED: bool>(
        geometry: &Geometry,
        oy: usize,
        ox: usize,
        block: &Block<'_>,
    ) -> [__m512; P] {
        let mut sums = [_mm512_setzero_ps(); P];
        let columns = P - 1 + K;
        // The run's first input column (of tap 0), and its columns inside the row:
        // `low..high` (all of them unless `MASKED`: the interior's are inside).
        let first = ox as isize - geometry.padding.1 as isize;
        let (low, high) = if MASKED {
            let low = first.min(0).unsigned_abs().min(columns);
            let inside = geometry.width as isize - first;
            (low, inside.clamp(low as isize, columns as isize) as usize)
        } else {
            (0, columns)
        };
        if low == high {
            return sums;
        }
        for ky in geometry.rows_inside(oy) {
            let row = geometry.input_row(oy, ky) * geometry.width;
            let weights = &block.weights[ky * K * BLOCK..][..K * BLOCK];
            // Columns `low..high` of the run, inside the row (`first + low >= 0`).
            let start = (row as isize + first + low as isize) as usize;
            let inputs = &block.input[start * BLOCK..][..(high - low) * BLOCK];
            // SAFETY: 16 values each, inside the slices just taken.
            unsafe {
                let weight: [__m512; K] =
                    std::array::from_fn(|kx| _mm512_loadu_ps(weights.as_ptr().add(kx * BLOCK)));
                for column in 0..columns {
                    if MASKED && (column < low || column >= high) {
                        continue;
                    }
                    let value = _mm512_loadu_ps(inputs.as_ptr().add((column - low) * BLOCK));
                    for (kx, weight) in weight.iter().enumerate() {
                        // Pixel `column - kx` of the run reads this column at tap `kx`.
                        if (kx..kx + P).contains(&column) {
                            let pixel = column - kx;
                            sums[pixel] = _mm512_fmadd_ps(value, *weight, sums[pixel]);
                        }
                    }
                }
            }
        }
        sums
    }

    /// The sums of output pixel `ox` of row `oy` (at a row's end) over the taps inside
    /// the input.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn edge(geometry: &Geometry, oy: usize, ox: usize, block: &Block<'_>) -> __m512 {
        let mut sum = _mm512_setzero_ps();
        for (tap, at) in geometry.edge_taps(oy, ox) {
            let (weights, input) = (&block.weights[tap..][..BLOCK], &block.input[at..][..BLOCK]);
            // SAFETY: 16 values each, the slices just taken.
            unsafe {
                let product = _mm512_loadu_ps(input.as_ptr());
                sum = _mm512_fmadd_ps(product, _mm512_loadu_ps(weights.as_ptr()), sum);
            }
        }
        sum
    }

    /// `sums * scale + shift + residual`, clamped, stored as output pixels `ox..` of
    /// `out` (`K` and `S` as [`runs`]', for an instance per caller).
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn finish<const P: usize, const K: usize, const S: usize>(
        sums: &[__m512; P],
        ox: usize,
        block: &Block<'_>,
        residual: Option<&[f32]>,
        out: &mut [f32],
    ) {
        // SAFETY: 16 values each.
        let (scale, shift) = unsafe {
            (
                _mm512_loadu_ps(block.scale.as_ptr()),
                _mm512_loadu_ps(block.shift.as_ptr()),
            )
        };
        for (pixel, &sums) in sums.iter().enumerate() {
            let at = (ox + pixel) * BLOCK;
            let mut value = _mm512_fmadd_ps(sums, scale, shift);
            if let Some(residual) = residual {
                let residual = &residual[at..][..BLOCK];
                // SAFETY: the 16 values of this pixel, read only.
                value = _mm512_add_ps(value, unsafe { _mm512_loadu_ps(residual.as_ptr()) });
            }
            if let Some((low, high)) = block.clamp {
                // max then min with the value first, as `f32::max` and `min`: a NaN
                // becomes `low`.
                value = _mm512_min_ps(
                    _mm512_max_ps(value, _mm512_set1_ps(low)),
                    _mm512_set1_ps(high),
                );
            }
            let out = &mut out[at..][..BLOCK];
            // SAFETY: the 16 values of this pixel.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr(), value) };
        }
    }
}
