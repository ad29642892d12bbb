//! 2-D convolutions (NCHW input, OIHW weights) as matrix multiplications: a 1x1
//! convolution with stride 1 multiplies the input directly, any other unfolds the
//! patches of its block of output pixels first (im2col). The products run on
//! [`strips`](super::strips) where the CPU has AVX-512, else on the gemm crate.

use std::cell::RefCell;
use std::ops::Range;

use super::bf16_panels::Bf16Isa;
use super::blocked::{blocked_conv, Arithmetic, BLOCK};
use super::blocked_depthwise::blocked_depthwise;
use super::blocked_winograd;
use super::caches::level2_bytes;
use super::conv_operands::{finish_of, Conv2d, Operands, PerFilter};
use super::depthwise::{depthwise_plane, Plane};
use super::direct::{self, direct_conv};
use super::dots;
use super::edges::{copy_short, fill_zero, inside_columns};
use super::epilogue::Epilogue;
use super::filter_panels::{self, multiply_panel, PIXELS_PER_TILE};
use super::gemm::{gemm_block, Rhs};
use super::panels::PANEL;
use super::parallel::{chunk, Launch, Shared, INLINE_WORK};
use super::scratch::{prefix, reuse};
use super::simd::{avx512_available, Isa};
use super::strips::{multiply_strips, InRegisters, Product, Then};
use super::tensor::Arguments;
use super::winograd::{transform_weights_into, winograd_into, Plan, Tile};

/// Tasks split the output pixels when each gets at least this many, else the filters
/// (splits in whole [`PIXEL_TILE`]s stay balanced only over several tiles).
const MIN_TASK_PIXELS: usize = 4 * PIXEL_TILE;

/// Output pixels are split in multiples of this: the gemm crate's AVX-512 microkernel
/// covers 64 pixels (4 vectors of 16) at a time, and a narrower remainder runs a less
/// efficient one.
const PIXEL_TILE: usize = 64;

/// With strips, a convolution that unfolds its patches splits the pixels whenever each
/// task gets at least one vector of them (split at multiples of it): splitting the
/// filters instead, every task would unfold the whole input (DenseNet's 3x3 layers of
/// 32 filters on 14x14 and 7x7 did, at 42-53 GFLOP/s).
const VECTOR_PIXELS: usize = 16;

/// The bytes of unfolded patches one task multiplies at a time: half the level-2 cache
/// (blocks that stay there between im2col and the multiplication), from 128 KiB to
/// 1 MiB; 256 KiB where the cache's size is not reported. On this project's machine (1
/// MiB of L2) that is 512 KiB: DenseNet-121's 3x3 layers over 128 channels then unfold
/// 128 pixels at a time, not 64 (which cut their rows of 56 in two): per-layer medians
/// 0.90 (56x56) and 0.94 (28x28) of the time, over 10 alternating rounds (faster in 8).
fn unfolded_block_bytes() -> usize {
    level2_bytes().map_or(256 << 10, |bytes| (bytes / 2).clamp(128 << 10, 1 << 20))
}

/// Output pixels per unfolded block for a patch of `depth` values: within
/// [`unfolded_block_bytes`], but at least 64 (below that, repacking the weights for every
/// block costs more than the cache saves), a multiple of 64.
fn pixel_block(depth: usize) -> usize {
    let fitting = unfolded_block_bytes() / (depth.max(1) * std::mem::size_of::<f32>());
    fitting.max(PIXEL_TILE).next_multiple_of(PIXEL_TILE)
}

thread_local! {
    /// The unfolded patches of the tasks that run on this thread.
    static UNFOLDED: RefCell<Vec<f32>> = RefCell::default();
    /// The phase planes of the convolutions called on this thread (see [`Phases`]).
    static PHASES: RefCell<Vec<f32>> = RefCell::default();
    /// The per-call Winograd transforms of kernels (see [`winograd_per_call`]).
    static WINOGRAD_KERNEL: RefCell<Vec<f32>> = RefCell::default();
}

/// Unfolds the patches of output pixels `pixels` of one image's group into `column`
/// (`[channels * kh * kw, pixels.len()]`, row-major), zeros where they fall in padding.
///
/// At stride 1 with the output as wide as the input, each unfolded row is the input
/// plane shifted ([`unfold_shifted`]). Otherwise walks output rows, not pixels: each
/// (channel, ky, kx, output row) is a strided (or contiguous) run of one input row, with
/// zeros at the edges. The runs are short on small images (7 or 14 values), so what does
/// not change along a column of the kernel (which output columns read inside the input)
/// is worked out once per `kx`, and the rows are walked without divisions.
fn im2col(
    shape: &Conv2d,
    input: &[f32],
    output_width: usize,
    pixels: std::ops::Range<usize>,
    column: &mut [f32],
    phases: Option<&[f32]>,
) {
    let width = pixels.len();
    let (kernel_h, kernel_w) = shape.kernel;
    let channels = shape.channels / shape.groups;
    let (stride_y, stride_x) = shape.stride;
    let (dilation_y, dilation_x) = shape.dilation;
    let (pad_top, pad_left) = (shape.padding.0 as isize, shape.padding.1 as isize);
    let first_row = pixels.start / output_width;
    let first_column = pixels.start % output_width;
    // The input rows the block reads, in every channel.
    let last_row = (pixels.end.max(pixels.start + 1) - 1) / output_width;
    let read_rows = {
        let first = (first_row * stride_y) as isize - pad_top;
        let last = (last_row * stride_y + (kernel_h - 1) * dilation_y) as isize - pad_top;
        let clamp = |row: isize| row.clamp(0, shape.height as isize) as usize;
        clamp(first)..clamp(last + 1)
    };
    let plane_size = shape.height * shape.width;
    // At stride 1, with the output as wide as the input, each unfolded row is the input
    // plane shifted (see `unfold_shifted`).
    let shifted_plane = shape.stride == (1, 1) && output_width == shape.width;
    for channel in 0..channels {
        // (From phase planes, the input planes themselves are not read.)
        let ahead = (channel + PREFETCH_CHANNELS) * plane_size;
        let ahead = ahead + read_rows.start * shape.width..ahead + read_rows.end * shape.width;
        if let (None, Some(ahead)) = (phases, input.get(ahead)) {
            prefetch(ahead);
        }
        let plane = &input[channel * plane_size..(channel + 1) * plane_size];
        for ky in 0..kernel_h {
            let y0 = (ky * dilation_y) as isize - pad_top;
            for kx in 0..kernel_w {
                let row = (channel * kernel_h + ky) * kernel_w + kx;
                let out = &mut column[row * width..(row + 1) * width];
                let x0 = (kx * dilation_x) as isize - pad_left;
                if let Some(phases) = phases {
                    let phase = Phases::plane(phases, shape, channel, (y0, x0));
                    let shift = (y0.div_euclid(2), x0.div_euclid(2));
                    unfold_shifted(phase, shape.width / 2, shift, pixels.clone(), out);
                    continue;
                }
                if shifted_plane {
                    unfold_shifted(plane, shape.width, (y0, x0), pixels.clone(), out);
                    continue;
                }
                let inside = inside_columns(x0, stride_x, shape.width, output_width);
                let (mut oy, mut ox) = (first_row, first_column);
                let mut at = 0;
                while at < width {
                    let length = (output_width - ox).min(width - at);
                    let run = &mut out[at..at + length];
                    let y = (oy * stride_y + ky * dilation_y) as isize - pad_top;
                    if y < 0 || y as usize >= shape.height {
                        fill_zero(run);
                    } else {
                        let source =
                            &plane[y as usize * shape.width..(y as usize + 1) * shape.width];
                        copy_row(source, x0, stride_x, inside, ox, run);
                    }
                    at += length;
                    oy += 1;
                    ox = 0;
                }
            }
        }
    }
}

/// A stride-2 convolution's input split into phase planes: per channel, the input's
/// values at (even row, even column), (even, odd), (odd, even) and (odd, odd), each an
/// `H/2 x W/2` plane. Output pixel `(oy, ox)` reads input `(2 oy + y0, 2 ox + x0)` for
/// the tap at `(y0, x0)`: value `(oy + y0 / 2, ox + x0 / 2)` of one phase plane (halves
/// rounded down). When the output is `W/2` wide, each unfolded row is then a shifted
/// phase plane ([`unfold_shifted`]), not a walk of stride-2 runs through the input rows
/// (ResNet-50's 7x7 stem and 3x3 stride-2 layers spent 18-24% of their time in them;
/// from phase planes its stem took 0.87-0.89 of its time, 3 alternating rounds).
struct Phases;

impl Phases {
    /// Whether `shape` (`output_width` wide) unfolds from phase planes: stride 2, a kernel
    /// wider than 1x1 (a 1x1 kernel reads one phase: no copy of the others), an even,
    /// non-empty input, an output half as wide.
    fn fit(shape: &Conv2d, output_width: usize) -> bool {
        shape.stride == (2, 2)
            && shape.kernel != (1, 1)
            && shape.height > 0
            && shape.height.is_multiple_of(2)
            && shape.width.is_multiple_of(2)
            && output_width == shape.width / 2
    }

    /// Splits `channels` planes of `input` (`height x width` each) into `phases`, the
    /// same channels' phase planes.
    fn split(shape: &Conv2d, input: &[f32], phases: &mut [f32]) {
        let (height, width) = (shape.height, shape.width);
        let quarter = height / 2 * (width / 2);
        for (plane, phases) in input
            .chunks_exact(height * width)
            .zip(phases.chunks_exact_mut(4 * quarter))
        {
            for (y, row) in plane.chunks_exact(width).enumerate() {
                for column_phase in 0..2 {
                    let phase = (y % 2) * 2 + column_phase;
                    let start = phase * quarter + y / 2 * (width / 2);
                    copy_every_other(&mut phases[start..start + width / 2], &row[column_phase..]);
                }
            }
        }
    }

    /// Channel `channel`'s phase plane that the tap at input offset `(y0, x0)` reads.
    fn plane<'a>(
        phases: &'a [f32],
        shape: &Conv2d,
        channel: usize,
        (y0, x0): (isize, isize),
    ) -> &'a [f32] {
        let quarter = shape.height / 2 * (shape.width / 2);
        let phase = y0.rem_euclid(2) as usize * 2 + x0.rem_euclid(2) as usize;
        &phases[(channel * 4 + phase) * quarter..][..quarter]
    }
}

/// One unfolded row of [`im2col`] at stride 1 when the output is as wide as the input
/// (`width`): output pixel `p` (row-major) reads `plane[p + dy * width + dx]`, the plane
/// shifted by `(dy, dx)`, or 0 where that falls outside it. So the block `pixels` is
/// one contiguous copy, then zeros: whole rows above or below the plane, and `|dx|`
/// values at one end of each row (which the copy took from the next or previous row).
/// Its runs went row by row: 7 to 56 values each for DenseNet-121's 3x3 layers, where
/// unfolding took 30-45% of the time.
fn unfold_shifted(
    plane: &[f32],
    width: usize,
    (dy, dx): (isize, isize),
    pixels: Range<usize>,
    out: &mut [f32],
) {
    let size = plane.len() as isize;
    let offset = dy * width as isize + dx;
    // The pixels whose row is inside the plane, and those whose source index is.
    let rows = (-dy).max(0) * width as isize..(size - dy * width as isize).max(0);
    let copied = rows.start.max(-offset).max(pixels.start as isize)
        ..rows.end.min(size - offset).min(pixels.end as isize);
    let (start, end) = (pixels.start as isize, pixels.end as isize);
    if copied.start >= copied.end {
        fill_zero(out);
        return;
    }
    let local = (copied.start - start) as usize..(copied.end - start) as usize;
    fill_zero(&mut out[..local.start]);
    fill_zero(&mut out[local.end..(end - start) as usize]);
    let source = &plane[(copied.start + offset) as usize..(copied.end + offset) as usize];
    if source.len() > 64 {
        out[local.clone()].copy_from_slice(source);
    } else {
        copy_short(&mut out[local.clone()], source);
    }
    // The columns whose source is outside the row, in every row of the copy.
    let band = if dx < 0 {
        0..(-dx as usize).min(width)
    } else {
        width - (dx as usize).min(width)..width
    };
    if band.is_empty() {
        return;
    }
    let first_row = copied.start as usize / width;
    let last_row = (copied.end as usize - 1) / width;
    for row in first_row..=last_row {
        let columns = (row * width + band.start).max(copied.start as usize)
            ..(row * width + band.end).min(copied.end as usize);
        if columns.start < columns.end {
            fill_zero(&mut out[columns.start - pixels.start..columns.end - pixels.start]);
        }
    }
}

/// How many channels ahead [`im2col`] asks for the input rows it will read: its runs
/// are short (one output row each) and jump from plane to plane, which the hardware
/// prefetchers do not follow, so reading an input that is not in cache waited on memory
/// (ResNet-50's stride-2 layers: 10-24% of their time in im2col).
const PREFETCH_CHANNELS: usize = 4;

/// Asks the CPU to bring `values` into cache (a hint; nothing on other architectures).
fn prefetch(values: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    for line in values.chunks(16) {
        // SAFETY: a prefetch only hints; the address is inside `values`.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr().cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = values;
}

/// `run[i] = source[x0 + (first + i) * stride]`, 0 where that falls outside `source`;
/// `inside` is [`inside_columns`] of `source`'s row.
fn copy_row(
    source: &[f32],
    x0: isize,
    stride: usize,
    inside: (usize, usize),
    first: usize,
    run: &mut [f32],
) {
    let end = first + run.len();
    let (low, high) = (inside.0.clamp(first, end), inside.1.clamp(first, end));
    if low >= high {
        fill_zero(run);
        return;
    }
    fill_zero(&mut run[..low - first]);
    fill_zero(&mut run[high - first..]);
    let start = (x0 + (low * stride) as isize) as usize;
    let inside = &mut run[low - first..high - first];
    if stride == 1 {
        copy_short(inside, &source[start..start + inside.len()]);
    } else if stride == 2 {
        copy_every_other(inside, &source[start..]);
    } else {
        for (slot, x) in inside.iter_mut().zip((start..).step_by(stride)) {
            *slot = source[x];
        }
    }
}

/// `destination[i] = source[2 * i]`: the runs of [`im2col`] at stride 2. Whole chunks
/// of 8 values from 16 are fixed-size, which LLVM turns into two vector loads and a
/// shuffle (a scalar loop took 5% of ResNet-50, whose stem and downsampling layers
/// have stride 2).
fn copy_every_other(destination: &mut [f32], source: &[f32]) {
    let chunks = (destination.len() / 8).min(source.len() / 16);
    for (to, from) in destination[..chunks * 8]
        .chunks_exact_mut(8)
        .zip(source.chunks_exact(16))
    {
        let from: &[f32; 16] = from.try_into().expect("chunks of 16");
        let to: &mut [f32; 8] = to.try_into().expect("chunks of 8");
        *to = std::array::from_fn(|i| from[2 * i]);
    }
    for (index, slot) in destination.iter_mut().enumerate().skip(chunks * 8) {
        *slot = source[2 * index];
    }
}

/// How a convolution is computed: by [`conv2d_into`] (the kernel as given), by
/// [`depthwise_conv`] (one input channel per group), by [`winograd_conv`] (the kernel
/// in that variant's Winograd form), by [`filter_panels_conv`] (the kernel packed in
/// filter panels), by [`blocked_conv`] (a channel-blocked output, from a blocked or
/// an NCHW input, the kernel in filter panels; with the tiles of an [`Isa`]), by
/// [`blocked_winograd::blocked_winograd`] (blocked input and output, the kernel in that
/// module's Winograd form; its products on the same tiles), by [`blocked_depthwise`]
/// (blocked input and output, one channel per group, the kernel OIHW), by
/// [`direct_conv`] (few input channels onto wide rows) or by [`dots::dot_conv`] (onto a
/// few pixels, the kernel OIHW).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Algorithm {
    Unfolded,
    Depthwise(Isa),
    Winograd(Tile),
    FilterPanels,
    Blocked {
        input_blocked: bool,
        arithmetic: Arithmetic,
    },
    BlockedWinograd {
        tile: Tile,
        isa: Isa,
    },
    BlockedDepthwise(Isa),
    Direct {
        blocked: bool,
        isa: Isa,
    },
    Dots,
}

impl Algorithm {
    /// # Safety
    /// As [`conv2d_into`], [`depthwise_conv`], [`winograd_conv`], [`filter_panels_conv`],
    /// [`blocked_conv`], [`blocked_winograd::blocked_winograd`], [`blocked_depthwise`],
    /// [`direct_conv`] or [`dots::dot_conv`] (this algorithm's).
    unsafe fn convolve(
        self,
        shape: &Conv2d,
        operands: Operands<'_>,
        launch: Launch,
    ) -> Result<(), String> {
        // SAFETY: the caller's contract.
        unsafe {
            match self {
                Algorithm::Unfolded => conv2d_into(shape, operands, launch),
                Algorithm::Depthwise(isa) => depthwise_conv(shape, isa, operands, launch),
                Algorithm::Winograd(tile) => winograd_conv(tile, shape, operands, launch),
                Algorithm::FilterPanels => filter_panels_conv(shape, operands, launch),
                Algorithm::Blocked {
                    input_blocked,
                    arithmetic,
                } => blocked_conv(shape, input_blocked, arithmetic, operands, launch),
                Algorithm::BlockedWinograd { tile, isa } => {
                    blocked_winograd::blocked_winograd(shape, tile, isa, operands, launch)
                }
                Algorithm::BlockedDepthwise(isa) => blocked_depthwise(shape, isa, operands, launch),
                Algorithm::Direct { blocked, isa } => {
                    direct_conv(shape, isa, blocked, operands, launch)
                }
                Algorithm::Dots => dots::dot_conv(shape, operands, launch),
            }
        }
    }
}

/// `out = epilogue(conv2d(x, w) * scale + shift + residual)`.
///
/// # Safety
/// `x`, `w`, `residual` and `out` hold the sizes `shape` describes (`per_filter`: one
/// value per filter), are valid for the call, and `out` overlaps none of the others.
pub(crate) unsafe fn conv2d_into(
    shape: &Conv2d,
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
    let residual = residual.map(|residual| Shared(residual.cast_mut()));
    let (output_height, output_width) = shape
        .output()
        .ok_or("the kernel does not fit the padded input")?;
    let pixels = output_height * output_width;
    let (groups, filters) = (shape.groups, shape.filters / shape.groups);
    let channels = shape.channels / groups;
    let depth = channels * shape.kernel.0 * shape.kernel.1;
    let plane = shape.height * shape.width;
    let (x, w) = (Shared(x.cast_mut()), Shared(w.cast_mut()));
    let strips = avx512_available();
    let (by_pixels, pixel_align) = if pixels >= 2 * MIN_TASK_PIXELS {
        (true, PIXEL_TILE)
    } else if strips && !shape.pointwise() && pixels >= 2 * VECTOR_PIXELS {
        (true, VECTOR_PIXELS)
    } else {
        (false, PIXEL_TILE)
    };
    let phased = Phases::fit(shape, output_width);
    // The phase planes live on this thread; the tasks (which do not use `PHASES`) write
    // and read them through a pointer.
    reuse(&PHASES, |phases| {
        let phases = phased.then(|| Shared(prefix(phases, channels * plane).as_mut_ptr()));
        for image in 0..shape.batch {
            for group in 0..groups {
                let input = Shared(x.at((image * shape.channels + group * channels) * plane));
                if let Some(phases) = phases {
                    launch(channels * plane < INLINE_WORK, &|task, tasks| {
                        let part = chunk(channels, tasks, task, 1);
                        // SAFETY: these channels' input planes, read only, and their phase
                        // planes (as many values), this task's alone.
                        let (planes, split) = unsafe {
                            (
                                std::slice::from_raw_parts(
                                    input.at(part.start * plane).cast_const(),
                                    part.len() * plane,
                                ),
                                std::slice::from_raw_parts_mut(
                                    phases.at(part.start * plane),
                                    part.len() * plane,
                                ),
                            )
                        };
                        Phases::split(shape, planes, split);
                    })?;
                }
                let weights = Shared(w.at(group * filters * depth));
                let first_output = (image * shape.filters + group * filters) * pixels;
                let output = Shared(out.at(first_output));
                let planes = OutputPlanes {
                    out: output,
                    residual: residual.map(|residual| Shared(residual.at(first_output))),
                    pixels,
                    per_filter,
                    first_filter: group * filters,
                    epilogue,
                };
                // The same for strips: all in registers, but a GELU or SiLU.
                let in_registers = InRegisters {
                    scale: per_filter
                        .and_then(|per_filter| per_filter.scale)
                        .map(|scale| &scale[group * filters..]),
                    shift: per_filter.map(|per_filter| &per_filter.shift[group * filters..]),
                    residual: residual.map(|residual| Shared(residual.at(first_output))),
                    clamp: epilogue.bounds(),
                };
                let activation =
                    |_: usize, _: Range<usize>, values: &mut [f32]| epilogue.apply(values);
                let then: Then<'_> = epilogue.after_registers().then_some(&activation);
                // The group's product with `x` (`depth` rows, `x_stride` apart) into `out`.
                let strip_product = |x: *const f32, x_stride: usize, out: Shared| Product {
                    depth,
                    w: weights.get(),
                    w_filter_stride: depth,
                    w_depth_stride: 1,
                    x,
                    x_stride,
                    out,
                    out_stride: pixels,
                };
                launch(filters * pixels * depth < INLINE_WORK, &|task, tasks| {
                    let (rows, columns) = if by_pixels {
                        (0..filters, chunk(pixels, tasks, task, pixel_align))
                    } else {
                        (chunk(filters, tasks, task, 8), 0..pixels)
                    };
                    if rows.is_empty() || columns.is_empty() {
                        return;
                    }
                    if shape.pointwise() && strips {
                        let product = strip_product(input.get(), plane, output);
                        // SAFETY: AVX-512F is there (`strips`); the group's weights and input
                        // planes, read only; the block (rows, columns) is this task's alone.
                        unsafe { multiply_strips(&product, rows, columns, &in_registers, then) };
                        return;
                    }
                    if shape.pointwise() {
                        // B's columns are the input's pixels themselves.
                        let rhs = Rhs {
                            data: input,
                            row_stride: plane as isize,
                            column_stride: 1,
                        };
                        // SAFETY: the group's input planes, read only; the destination block
                        // (rows, columns) is this task's alone.
                        unsafe {
                            gemm_block(
                                depth,
                                pixels,
                                weights.get(),
                                rhs,
                                output,
                                rows.clone(),
                                columns.clone(),
                                1.0,
                            )
                        };
                        // SAFETY: the block (rows, columns) is this task's alone.
                        unsafe { planes.finish(rows, columns) };
                        return;
                    }
                    // SAFETY: the group's input planes, read only.
                    let source = unsafe {
                        std::slice::from_raw_parts(input.get().cast_const(), channels * plane)
                    };
                    // SAFETY: the phase planes the launch call above wrote, read only.
                    let phases = phases.map(|phases| unsafe {
                        std::slice::from_raw_parts(phases.get().cast_const(), channels * plane)
                    });
                    let block = pixel_block(depth).min(columns.len());
                    reuse(&UNFOLDED, |unfolded| {
                        for start in columns.clone().step_by(block) {
                            let block_columns = start..(start + block).min(columns.end);
                            let unfolded = prefix(unfolded, depth * block_columns.len());
                            im2col(
                                shape,
                                source,
                                output_width,
                                block_columns.clone(),
                                unfolded,
                                phases,
                            );
                            if strips {
                                let product = strip_product(
                                    unfolded.as_ptr(),
                                    block_columns.len(),
                                    Shared(output.at(block_columns.start)),
                                );
                                let in_registers = InRegisters {
                                    residual: in_registers
                                        .residual
                                        .map(|residual| Shared(residual.at(block_columns.start))),
                                    ..in_registers
                                };
                                // SAFETY: AVX-512F is there (`strips`); `unfolded` holds `depth`
                                // rows of this block's columns; the destination block is this
                                // task's alone.
                                unsafe {
                                    multiply_strips(
                                        &product,
                                        rows.clone(),
                                        0..block_columns.len(),
                                        &in_registers,
                                        then,
                                    )
                                };
                                continue;
                            }
                            let rhs = Rhs {
                                data: Shared(unfolded.as_mut_ptr()),
                                row_stride: block_columns.len() as isize,
                                column_stride: 1,
                            };
                            // SAFETY: `unfolded` holds `depth` rows of this block's columns; the
                            // destination block (rows, block_columns) is this task's alone.
                            unsafe {
                                gemm_block(
                                    depth,
                                    pixels,
                                    weights.get(),
                                    rhs,
                                    Shared(output.at(block_columns.start)),
                                    rows.clone(),
                                    0..block_columns.len(),
                                    1.0,
                                )
                            };
                            // SAFETY: the block (rows, block_columns) is this task's alone.
                            unsafe { planes.finish(rows.clone(), block_columns) };
                        }
                    })
                })?;
            }
        }
        Ok(())
    })
}

/// `out = epilogue(conv2d(x, w) * scale + shift + residual)` for a convolution with one
/// input channel per group (`filters / groups` output channels read each input channel).
/// Tasks share out the output planes; strides 1 and 2 use the instructions of `isa`.
///
/// # Safety
/// As [`conv2d_into`], with `shape.channels == shape.groups`; `isa`
/// a kind this CPU runs ([`Isa::runs_here`]).
pub(crate) unsafe fn depthwise_conv(
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
    let plane = Plane {
        height: shape.height,
        width: shape.width,
        output_height,
        output_width,
        kernel: shape.kernel,
        stride: shape.stride,
        padding: (shape.padding.0, shape.padding.1),
        dilation: shape.dilation,
        columns: Vec::new(),
    }
    .with_columns();
    let (input_plane, output_plane) = (shape.height * shape.width, output_height * output_width);
    let kernel_size = shape.kernel.0 * shape.kernel.1;
    let per_group = shape.filters / shape.groups;
    let planes = shape.batch * shape.filters;
    let residual = residual.map(|residual| Shared(residual.cast_mut()));
    let (x, w) = (Shared(x.cast_mut()), Shared(w.cast_mut()));
    launch(
        planes * output_plane * kernel_size < INLINE_WORK,
        &|task, tasks| {
            for index in chunk(planes, tasks, task, 1) {
                let (image, filter) = (index / shape.filters, index % shape.filters);
                let channel = filter / per_group;
                // SAFETY: input plane `channel` of image `image` and filter `filter`'s kernel,
                // read only; output plane `index` is this task's alone (`chunk` ranges do not
                // overlap), and the residual's plane is read only.
                let (input, weights, values, residual) = unsafe {
                    (
                        std::slice::from_raw_parts(
                            x.at((image * shape.channels + channel) * input_plane),
                            input_plane,
                        ),
                        std::slice::from_raw_parts(w.at(filter * kernel_size), kernel_size),
                        std::slice::from_raw_parts_mut(out.at(index * output_plane), output_plane),
                        residual.map(|residual| {
                            std::slice::from_raw_parts(
                                residual.at(index * output_plane),
                                output_plane,
                            )
                        }),
                    )
                };
                let finish = finish_of(per_filter, filter, residual, epilogue);
                depthwise_plane(&plane, input, weights, &finish, values, isa);
            }
        },
    )
}

/// `out = epilogue(conv3x3(x, w) * scale + shift + residual)` by Winograd with output
/// tiles `tile`, with `u` the kernel's transform (`[values, channels, filters]`).
///
/// # Safety
/// As [`conv2d_into`], for a 3x3 kernel with stride 1, no dilation and one group.
pub(crate) unsafe fn winograd_conv(
    tile: Tile,
    shape: &Conv2d,
    operands: Operands<'_>,
    launch: Launch,
) -> Result<(), String> {
    let Operands {
        x,
        w: u,
        per_filter,
        residual,
        epilogue,
        out,
    } = operands;
    let (output_height, output_width) = shape
        .output()
        .ok_or("the kernel does not fit the padded input")?;
    let plan = Plan {
        batch: shape.batch,
        channels: shape.channels,
        height: shape.height,
        width: shape.width,
        filters: shape.filters,
        pad_top: shape.padding.0,
        pad_left: shape.padding.1,
        output_height,
        output_width,
        tile,
    };
    let residual = residual.map(|residual| Shared(residual.cast_mut()));
    let output_plane = output_height * output_width;
    let finish = |image: usize, filter: usize, pixel: usize, values: &mut [f32]| {
        let offset = (image * shape.filters + filter) * output_plane + pixel;
        // SAFETY: the residual's run at this output run's position; no task writes it.
        let residual = residual.map(|residual| unsafe {
            std::slice::from_raw_parts(residual.at(offset), values.len())
        });
        finish_of(per_filter, filter, residual, epilogue).apply(values);
    };
    // SAFETY: the caller's contract.
    unsafe { winograd_into(&plan, x, u, out, &finish, launch) }
}

/// `out = epilogue(conv2d(x, w) * scale + shift + residual)` with `w` packed in filter
/// panels, `[ceil(filters / 64), channels, kh, kw, 64]` (see [`filter_panels`]): for
/// output planes of few pixels, which strips' 64 pixel lanes would not fill. Per image,
/// the input is unfolded once (but for a 1x1 convolution with stride 1), the tasks
/// sharing out its channels, then the tasks share out the panels.
///
/// # Safety
/// As [`conv2d_into`], with one group and `w` the packed panels of `shape.filters`.
pub(crate) unsafe fn filter_panels_conv(
    shape: &Conv2d,
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
    let pixels = output_height * output_width;
    let per_channel = shape.kernel.0 * shape.kernel.1;
    let depth = shape.channels * per_channel;
    let plane = shape.height * shape.width;
    let residual = residual.map(|residual| Shared(residual.cast_mut()));
    let (x, w) = (Shared(x.cast_mut()), Shared(w.cast_mut()));
    let panels = shape.filters.div_ceil(PANEL);
    let isa = Isa::best();
    let inline = shape.filters * pixels * depth < INLINE_WORK;
    // The unfolded input lives on this thread; the tasks (which do not use `UNFOLDED`)
    // write and read it through a pointer.
    reuse(&UNFOLDED, |buffer| {
        let unfolded =
            (!shape.pointwise()).then(|| Shared(prefix(buffer, depth * pixels).as_mut_ptr()));
        for image in 0..shape.batch {
            let input = Shared(x.at(image * shape.channels * plane));
            let (rows, x_stride) = match unfolded {
                None => (input, plane),
                Some(unfolded) => {
                    launch(inline, &|task, tasks| {
                        let channels = chunk(shape.channels, tasks, task, 1);
                        // SAFETY: the image's input planes of these channels, read only;
                        // their rows of the unfolded input, this task's alone.
                        let (source, column) = unsafe {
                            (
                                std::slice::from_raw_parts(
                                    input.at(channels.start * plane).cast_const(),
                                    channels.len() * plane,
                                ),
                                std::slice::from_raw_parts_mut(
                                    unfolded.at(channels.start * per_channel * pixels),
                                    channels.len() * per_channel * pixels,
                                ),
                            )
                        };
                        let part = Conv2d {
                            channels: channels.len(),
                            groups: 1,
                            ..*shape
                        };
                        im2col(&part, source, output_width, 0..pixels, column, None);
                    })?;
                    (unfolded, pixels)
                }
            };
            let first_output = image * shape.filters * pixels;
            let planes = OutputPlanes {
                out: Shared(out.at(first_output)),
                residual: residual.map(|residual| Shared(residual.at(first_output))),
                pixels,
                per_filter,
                first_filter: 0,
                epilogue,
            };
            launch(inline, &|task, tasks| {
                let operands = filter_panels::Operands {
                    depth,
                    panels: w.get().cast_const(),
                    x: rows.get().cast_const(),
                    x_stride,
                    out: Shared(out.at(first_output)),
                    out_stride: pixels,
                };
                // Whole panels per task when they share out evenly; else each panel's
                // pixels are split in `tasks` parts too (3 panels over 2 tasks made one
                // task compute 2: EfficientNet's 7x7 layers of 192 filters, 1.2x slower).
                let parts = if panels.is_multiple_of(tasks) {
                    1
                } else {
                    tasks
                };
                for unit in chunk(panels * parts, tasks, task, 1) {
                    let panel = unit / parts;
                    let columns = chunk(pixels, parts, unit % parts, PIXELS_PER_TILE);
                    let filters = panel * PANEL..(panel * PANEL + PANEL).min(shape.filters);
                    // SAFETY: `isa` is available; the panel, the image's
                    // `depth` rows and its output block (the panel's filters by
                    // `columns`, this task's alone) are inside the checked tensors.
                    unsafe {
                        multiply_panel(&operands, panel, filters.len(), columns.clone(), isa)
                    };
                    // SAFETY: the block (the panel's filters, `columns`) is this task's alone.
                    unsafe { planes.finish(filters, columns) };
                }
            })?;
        }
        Ok(())
    })
}

/// The output planes of one image's group (`pixels` values each, from `out`; the
/// residual's likewise from `residual`), and what finishes them: the per-filter step of
/// their filters (from filter `first_filter` of `per_filter`) and the epilogue.
#[derive(Clone, Copy)]
struct OutputPlanes<'a> {
    out: Shared,
    residual: Option<Shared>,
    pixels: usize,
    per_filter: Option<PerFilter<'a>>,
    first_filter: usize,
    epilogue: Epilogue,
}

impl OutputPlanes<'_> {
    /// The per-filter step, the residual and the activation of the block `filters` (of
    /// the planes) x `columns`, while it is in cache.
    ///
    /// # Safety
    /// The block lies in the planes and no other thread writes it meanwhile; no thread
    /// writes the residual.
    unsafe fn finish(&self, filters: Range<usize>, columns: Range<usize>) {
        for filter in filters {
            let offset = filter * self.pixels + columns.start;
            // SAFETY: filter `filter`'s run of `columns` in the block, and the residual's
            // (the function's contract).
            let (values, residual) = unsafe {
                (
                    std::slice::from_raw_parts_mut(self.out.at(offset), columns.len()),
                    self.residual.map(|residual| {
                        std::slice::from_raw_parts(residual.at(offset), columns.len())
                    }),
                )
            };
            finish_of(
                self.per_filter,
                self.first_filter + filter,
                residual,
                self.epilogue,
            )
            .apply(values);
        }
    }
}

/// What follows the convolution in a kernel's arguments.
#[derive(Clone, Copy, PartialEq, Eq)]
enum After {
    Nothing,
    Bias,
    /// gamma, beta, mean, variance, then epsilon.
    BatchNorm,
}

/// Whether a convolution kernel multiplies float32 values or bf16 pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Precision {
    F32,
    /// Only blocked convolutions, the kernel in filter panels of bf16 pairs
    /// (`[ceil(O / 64), C / 2, KH, KW, 64]`, see `blocked::bf16`).
    Bf16,
}

fn conv2d_with(
    args: &Arguments<'_>,
    after: After,
    has_residual: bool,
    precision: Precision,
) -> Result<(), String> {
    let tensors = match after {
        After::Nothing => 0,
        After::Bias => 1,
        After::BatchNorm => 4,
    };
    let first = 2 + tensors + usize::from(after == After::BatchNorm);
    args.expect_count(first + 11 + usize::from(has_residual))?;
    let name = args.name;
    let x = args.tensor(0, None)?;
    let w = args.tensor(1, None)?;
    // `x` and `out` `[N, C / 16, H, W, 16]`: channel-blocked (see `blocked`); `x` may
    // also be NCHW then (a network's first convolution).
    let out = args.output(first + 10 + usize::from(has_residual), None)?;
    let blocked = out.shape.len() == 5;
    let input_blocked = x.shape.len() == 5;
    if !matches!(x.shape.len(), 4 | 5)
        || !matches!(out.shape.len(), 4 | 5)
        || (input_blocked && !blocked)
    {
        return Err(format!(
            "{name}: x has rank {} and out rank {}: expected 4 and 4 (NCHW), 5 and 5 (blocked) or 4 and 5",
            x.shape.len(),
            out.shape.len()
        ));
    }
    let mut ints = [0usize; 10];
    for (offset, slot) in ints.iter_mut().enumerate() {
        *slot = usize::try_from(args.int(first + offset)?)
            .map_err(|_| format!("{name}: argument {} is negative", first + offset))?;
    }
    let [stride_h, stride_w, top, left, bottom, right, dilation_h, dilation_w, groups, epilogue] =
        ints;
    let bf16 = precision == Precision::Bf16;
    if bf16 && (!input_blocked || w.shape.len() != 5 || groups != 1) {
        return Err(format!(
            "{name}: a bf16 convolution takes blocked x and out, one group and its kernel in filter panels of bf16 pairs ([ceil(O / 64), C / 2, KH, KW, 64]): x {:?}, w {:?}, out {:?}, groups {groups}",
            x.shape, w.shape, out.shape
        ));
    }
    let whole_blocks =
        |view: &super::tensor::View<'_>| view.shape.len() != 5 || view.shape[4] == BLOCK as i64;
    // An OIHW kernel of one input channel per group onto a blocked output: a blocked
    // depthwise convolution (see `blocked_depthwise`).
    let blocked_depthwise = blocked && groups > 1 && w.shape.len() == 4;
    // `[16 or 36, ceil(out / 64), in, 64]` onto a blocked output: the blocked Winograd
    // form of F(2x2, 3x3) or F(4x4, 3x3) (see `blocked_winograd`).
    let blocked_winograd_tile =
        (blocked && !blocked_depthwise && w.shape.len() == 4 && w.shape[3] == PANEL as i64)
            .then(|| Tile::of_values(w.shape[0] as usize))
            .flatten();
    let blocked_winograd_form = blocked_winograd_tile.is_some();
    // An OIHW kernel from an NCHW input onto a blocked output (a network's stem, whose
    // output blocked layers read): summed directly where `direct::computes` it, else
    // packed in filter panels on this call.
    let oihw_onto_blocked = blocked
        && !input_blocked
        && w.shape.len() == 4
        && !blocked_winograd_form
        && !blocked_depthwise;
    if !whole_blocks(&x)
        || !whole_blocks(&out)
        || (blocked
            && w.shape.len() != 5
            && !blocked_winograd_form
            && !blocked_depthwise
            && !oihw_onto_blocked)
    {
        return Err(format!(
            "{name}: a blocked convolution takes blocks of {BLOCK} channels and its kernel in filter panels (or in blocked Winograd form, [16 or 36, ceil(out / 64), in, 64]; or OIHW, [C, 1, KH, KW], depthwise; or OIHW from an NCHW input): x {:?}, w {:?}, out {:?}",
            x.shape, w.shape, out.shape
        ));
    }
    // `[16 or 36, in, out]`: a 3x3 kernel in Winograd form (see `winograd`);
    // `[ceil(out / 64), in, kh, kw, 64]`: packed in filter panels; else OIHW.
    let winograd = w.shape.len() == 3;
    let packed = w.shape.len() == 5;
    if !winograd && !packed && w.shape.len() != 4 {
        return Err(format!(
            "{name}: w has rank {}, not 4 (or 3, Winograd; or 5, filter panels)",
            w.shape.len()
        ));
    }
    let algorithm = if let Some(tile) = blocked_winograd_tile {
        if !input_blocked {
            return Err(format!(
                "{name}: a blocked Winograd convolution takes a blocked input: x {:?}",
                x.shape
            ));
        }
        Algorithm::BlockedWinograd {
            tile,
            isa: Isa::best(),
        }
    } else if blocked_depthwise {
        if !input_blocked {
            return Err(format!(
                "{name}: a blocked depthwise convolution takes a blocked input: x {:?}",
                x.shape
            ));
        }
        Algorithm::BlockedDepthwise(Isa::best())
    } else if blocked {
        Algorithm::Blocked {
            input_blocked,
            arithmetic: if bf16 {
                Arithmetic::Bf16(Bf16Isa::best())
            } else {
                Arithmetic::F32(Isa::best())
            },
        }
    } else if packed {
        Algorithm::FilterPanels
    } else if winograd {
        let values = w.shape[0] as usize;
        let tile = Tile::of_values(values).ok_or_else(|| {
            format!("{name}: a Winograd kernel has 16 or 36 values per kernel, not {values}")
        })?;
        Algorithm::Winograd(tile)
    } else {
        Algorithm::Unfolded
    };
    let vectors = (0..tensors)
        .map(|index| args.tensor(2 + index, Some(1)))
        .collect::<Result<Vec<_>, _>>()?;
    // One input channel per group (checked with the other shapes below).
    let algorithm = if algorithm == Algorithm::Unfolded && groups > 1 && w.shape[1] == 1 {
        Algorithm::Depthwise(Isa::best())
    } else {
        algorithm
    };
    let epilogue = Epilogue::from_code(epilogue as i64)?;
    let residual = if has_residual {
        Some(args.tensor(first + 10, None)?)
    } else {
        None
    };
    let dim = |view: &super::tensor::View<'_>, index: usize| view.shape[index] as usize;
    let shape = Conv2d {
        batch: dim(&x, 0),
        channels: dim(&x, 1) * if input_blocked { BLOCK } else { 1 },
        height: dim(&x, 2),
        width: dim(&x, 3),
        filters: if winograd {
            dim(&w, 2)
        } else if packed || blocked_winograd_form {
            dim(&out, 1) * if blocked { BLOCK } else { 1 }
        } else {
            dim(&w, 0)
        },
        kernel: if winograd || blocked_winograd_form {
            (3, 3)
        } else {
            (dim(&w, 2), dim(&w, 3))
        },
        stride: (stride_h, stride_w),
        padding: (top, left, bottom, right),
        dilation: (dilation_h, dilation_w),
        groups,
    };
    let fits = groups > 0
        && shape.channels.is_multiple_of(groups)
        && shape.filters.is_multiple_of(groups)
        && (if let Some(tile) = blocked_winograd_tile {
            w.shape
                == [
                    tile.values() as i64,
                    shape.filters.div_ceil(PANEL) as i64,
                    shape.channels as i64,
                    PANEL as i64,
                ]
        } else if bf16 {
            dim(&w, 1) == shape.channels.div_ceil(2)
        } else {
            dim(&w, 1) * groups == shape.channels
        })
        && (!winograd || (shape.stride, shape.dilation, groups) == ((1, 1), (1, 1), 1))
        && (!packed
            || (groups == 1 && dim(&w, 0) == shape.filters.div_ceil(PANEL) && dim(&w, 4) == PANEL))
        && vectors.iter().all(|vector| vector.len() == shape.filters)
        && (!blocked
            || groups == 1
            || (blocked_depthwise && groups == shape.channels && shape.filters == shape.channels))
        && (!blocked || shape.filters.is_multiple_of(BLOCK))
        && (!blocked_winograd_form || blocked_winograd::computes(&shape))
        && residual.is_none_or(|residual| residual.shape == out.shape)
        && shape.output().is_some_and(|(height, width)| {
            let (batch, filters) = (shape.batch as i64, shape.filters as i64);
            let (height, width) = (height as i64, width as i64);
            if blocked {
                out.shape == [batch, filters / BLOCK as i64, height, width, BLOCK as i64]
            } else {
                out.shape == [batch, filters, height, width]
            }
        });
    if !fits {
        return Err(format!(
            "{name}: shapes do not fit: x {:?}, w {:?}, out {:?}, {shape:?}",
            x.shape, w.shape, out.shape
        ));
    }
    let vectors: Vec<&[f32]> = vectors
        .iter()
        .map(|vector| {
            // SAFETY: checked float32 tensors of `filters` elements, read only.
            unsafe { std::slice::from_raw_parts(vector.data.cast_const(), shape.filters) }
        })
        .collect();
    let (scale, shift);
    let per_filter = match after {
        After::Nothing => None,
        After::Bias => Some(PerFilter {
            scale: None,
            shift: vectors[0],
        }),
        After::BatchNorm => {
            let epsilon = args.float(2 + tensors)? as f32;
            let [gamma, beta, mean, variance] = [vectors[0], vectors[1], vectors[2], vectors[3]];
            scale = gamma
                .iter()
                .zip(variance)
                .map(|(gamma, variance)| gamma / (variance + epsilon).sqrt())
                .collect::<Vec<f32>>();
            shift = beta
                .iter()
                .zip(mean)
                .zip(&scale)
                .map(|((beta, mean), scale)| beta - mean * scale)
                .collect::<Vec<f32>>();
            Some(PerFilter {
                scale: Some(&scale),
                shift: &shift,
            })
        }
    };
    if let Some(residual) = residual {
        residual.check_disjoint(&out)?;
    }
    let residual = residual.map(|residual| residual.data.cast_const());
    // A network's stem, or a layer after a few NCHW ones (fewer channels than a block onto
    // wide rows, NCHW or blocked): summed directly, nothing unfolded or packed.
    let onto_blocks = match algorithm {
        Algorithm::Unfolded => Some(false),
        Algorithm::Blocked { .. } if oihw_onto_blocked => Some(true),
        _ => None,
    };
    // A layer onto a few pixels (a streaming model's short window): dot products along
    // the depth instead of a matrix product whose vectors of pixels would be mostly empty.
    let algorithm = match (onto_blocks, shape.output()) {
        (Some(false), _) if dots::computes(&shape) => Algorithm::Dots,
        (Some(blocked), Some((_, width))) => direct::computes(&shape, width, blocked)
            .map(|isa| Algorithm::Direct { blocked, isa })
            .unwrap_or(algorithm),
        _ => algorithm,
    };
    let operands = Operands {
        x: x.data,
        w: w.data,
        per_filter,
        residual,
        epilogue,
        out: Shared(out.data),
    };
    if oihw_onto_blocked && matches!(algorithm, Algorithm::Blocked { .. }) {
        let depth = shape.channels * shape.kernel.0 * shape.kernel.1;
        // SAFETY: an OIHW kernel of one group (checked above: `blocked` takes one group
        // but depthwise): `F * C * KH * KW` values, read only.
        let kernel = unsafe { std::slice::from_raw_parts(w.data, shape.filters * depth) };
        let panels = super::panels::pack(depth, shape.filters, |at, filter| {
            kernel[filter * depth + at]
        });
        let operands = Operands {
            w: panels.as_ptr(),
            ..operands
        };
        // SAFETY: the shapes were checked above (an NCHW `x`, a blocked `out` of whole
        // blocks, one group), and `panels` is the kernel in the filter panels of the
        // output's filters that the blocked kernel reads.
        return unsafe { algorithm.convolve(&shape, operands, args.launch) };
    }
    // A 3x3 layer over a large plane whose kernel came OIHW (NCHW tensors) or in filter
    // panels (blocked ones): Winograd F(4x4), the kernel transformed on this call into the
    // form the algorithm reads (see `winograd_per_call`); with the kernel's values.
    let tile = Tile::Four;
    let per_call = match algorithm {
        Algorithm::Blocked {
            input_blocked: true,
            arithmetic: Arithmetic::F32(isa),
        } if packed && winograd_per_call(&shape) && blocked_winograd::computes(&shape) => Some((
            Algorithm::BlockedWinograd { tile, isa },
            shape.filters.div_ceil(PANEL) * PANEL * shape.channels * 9,
        )),
        Algorithm::Unfolded if winograd_per_call(&shape) => Some((
            Algorithm::Winograd(tile),
            shape.filters * shape.channels * 9,
        )),
        _ => None,
    };
    if let Some((winograd, kernel_values)) = per_call {
        return reuse(&WINOGRAD_KERNEL, |buffer| {
            // Both forms hold `tile.values()` values per 9 of the kernel: `[36, C, F]`,
            // or `[36, ceil(F / 64), C, 64]` from the panels' `[ceil(F / 64), C, 3, 3, 64]`.
            let u = prefix(buffer, kernel_values / 9 * tile.values());
            // SAFETY: `w` is an OIHW kernel of one group, 3x3 (`F * C * 9` values), or a
            // 3x3 kernel in filter panels (`ceil(F / 64) * C * 9 * 64`): checked above and
            // by `winograd_per_call`; read only.
            let kernel = unsafe { std::slice::from_raw_parts(w.data, kernel_values) };
            if packed {
                blocked_winograd::transform_panels_into(kernel, shape.channels, tile, u);
            } else {
                transform_weights_into(kernel, shape.filters, shape.channels, tile, u);
            }
            // SAFETY: the shapes were checked above (blocked: a blocked `x` and `out`, and
            // what `blocked_winograd::computes`), `winograd_per_call` that Winograd computes
            // it, and `u` is its kernel's transform in the form the algorithm reads.
            unsafe {
                winograd.convolve(
                    &shape,
                    Operands {
                        w: u.as_ptr(),
                        ..operands
                    },
                    args.launch,
                )
            }
        });
    }
    // SAFETY: every shape was checked against the others above (for Winograd: a 3x3
    // kernel, stride 1, no dilation, one group; for filter panels: one group, the panels
    // of the output's filters; blocked: whole blocks of channels in `x` and `out`; blocked
    // Winograd: also a blocked `x`, what `blocked_winograd::computes`, and the form's
    // `[16 or 36, ceil(F / 64), C, 64]` for its tile; blocked depthwise: a blocked `x`, an
    // OIHW `w` of one channel per group, as many groups as channels and filters; direct:
    // an OIHW `w`, an NCHW `x` and an NCHW or blocked `out` of whole blocks, one group,
    // as `direct::computes` checks).
    unsafe { algorithm.convolve(&shape, operands, args.launch) }
}

/// Output pixels from which a 3x3 convolution whose kernel came OIHW is computed by
/// Winograd F(4x4, 3x3), its kernel transformed on each call (see [`winograd_per_call`]).
const WINOGRAD_PER_CALL_PIXELS: usize = 64 * 64;

/// Channels and filters from which likewise.
const WINOGRAD_PER_CALL_CHANNELS: usize = 16;

/// Whether a 3x3 convolution (stride 1, no dilation, one group) whose kernel came OIHW
/// or in filter panels is computed by Winograd F(4x4, 3x3) with its kernel transformed
/// on each call, instead of im2col or the blocked kernel's direct sums: over large
/// planes, on CPUs without AVX-512. relax-build packs kernels in Winograd form at load
/// only where the sizes are static and there are at least 64 channels and filters (the
/// layers its thresholds were measured on, with AVX-512); a detector's FPN layers over
/// symbolic planes come OIHW, or in filter panels on blocked tensors. With AVX2, one
/// core, 96 to 24 channels over 120x120: 9.3 ms by Winograd against 13.8 by im2col (the
/// transform of the kernel on each call is a small part: 24 x 96 kernels of 9 values);
/// blocked, 96 to 32 channels: 5.1 ms against 10.0 by direct sums.
fn winograd_per_call(shape: &Conv2d) -> bool {
    let pixels = shape.output().map_or(0, |(height, width)| height * width);
    shape.kernel == (3, 3)
        && shape.stride == (1, 1)
        && shape.dilation == (1, 1)
        && shape.groups == 1
        && shape.channels.min(shape.filters) >= WINOGRAD_PER_CALL_CHANNELS
        && pixels >= WINOGRAD_PER_CALL_PIXELS
        && Isa::best() != Isa::Avx512
}

/// `relax_runtime.conv2d(x, w, stride_h, stride_w, top, left, bottom, right, dilation_h,
/// dilation_w, groups, epilogue, out)`.
pub(crate) fn conv2d(args: &Arguments<'_>) -> Result<(), String> {
    conv2d_with(args, After::Nothing, false, Precision::F32)
}

/// `relax_runtime.conv2d_bias(x, w, bias, ...)`: as `conv2d`, plus a bias per filter.
pub(crate) fn conv2d_bias(args: &Arguments<'_>) -> Result<(), String> {
    conv2d_with(args, After::Bias, false, Precision::F32)
}

/// `relax_runtime.conv2d_bn(x, w, gamma, beta, mean, variance, epsilon, ...)`: as
/// `conv2d`, then inference batch norm per filter.
pub(crate) fn conv2d_bn(args: &Arguments<'_>) -> Result<(), String> {
    conv2d_with(args, After::BatchNorm, false, Precision::F32)
}

/// `relax_runtime.conv2d_add(x, w, ..., epilogue, residual, out)`: as `conv2d`, with
/// `residual` (of the output's shape) added before the activation.
pub(crate) fn conv2d_add(args: &Arguments<'_>) -> Result<(), String> {
    conv2d_with(args, After::Nothing, true, Precision::F32)
}

/// `relax_runtime.conv2d_bias_add(x, w, bias, ..., epilogue, residual, out)`.
pub(crate) fn conv2d_bias_add(args: &Arguments<'_>) -> Result<(), String> {
    conv2d_with(args, After::Bias, true, Precision::F32)
}

/// `relax_runtime.conv2d_bn_add(x, w, gamma, beta, mean, variance, epsilon, ...,
/// epilogue, residual, out)`.
pub(crate) fn conv2d_bn_add(args: &Arguments<'_>) -> Result<(), String> {
    conv2d_with(args, After::BatchNorm, true, Precision::F32)
}

/// `relax_runtime.conv2d_bf16` (and `_bias`, `_bn`, `_add`, `_bias_add`, `_bn_add`): as the
/// float32 kernel of the same suffix, on blocked tensors, with the kernel in filter panels
/// of bf16 pairs: `x` rounded to bf16, the sums in float32 (see `blocked::bf16`).
pub(crate) fn conv2d_bf16(args: &Arguments<'_>) -> Result<(), String> {
    conv2d_with(args, After::Nothing, false, Precision::Bf16)
}

/// `relax_runtime.conv2d_bf16_bias`: see [`conv2d_bf16`].
pub(crate) fn conv2d_bf16_bias(args: &Arguments<'_>) -> Result<(), String> {
    conv2d_with(args, After::Bias, false, Precision::Bf16)
}

/// `relax_runtime.conv2d_bf16_bn`: see [`conv2d_bf16`].
pub(crate) fn conv2d_bf16_bn(args: &Arguments<'_>) -> Result<(), String> {
    conv2d_with(args, After::BatchNorm, false, Precision::Bf16)
}

/// `relax_runtime.conv2d_bf16_add`: see [`conv2d_bf16`].
pub(crate) fn conv2d_bf16_add(args: &Arguments<'_>) -> Result<(), String> {
    conv2d_with(args, After::Nothing, true, Precision::Bf16)
}

/// `relax_runtime.conv2d_bf16_bias_add`: see [`conv2d_bf16`].
pub(crate) fn conv2d_bf16_bias_add(args: &Arguments<'_>) -> Result<(), String> {
    conv2d_with(args, After::Bias, true, Precision::Bf16)
}

/// `relax_runtime.conv2d_bf16_bn_add`: see [`conv2d_bf16`].
pub(crate) fn conv2d_bf16_bn_add(args: &Arguments<'_>) -> Result<(), String> {
    conv2d_with(args, After::BatchNorm, true, Precision::Bf16)
}

#[cfg(test)]
mod tests;
