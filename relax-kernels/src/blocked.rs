//! Convolutions on channel-blocked tensors: `[N, C/16, H, W, 16]`, the 16 channels of a
//! pixel contiguous (one AVX-512 vector), the layout relax-build's driver gives CNNs whose
//! convolutions have whole blocks of 16 channels (ONNX Runtime's "NCHWc").
//!
//! In NCHW, a convolution is a matrix product whose depth (the channels) runs across
//! planes: each step of it reads another row a plane away, and writes go to as many
//! output rows as there are filters (every one a stream of its own for the prefetchers).
//! Blocked, a tile of 64 filters x up to 6 output pixels of one output row broadcasts each
//! pixel's channel values (6 cache lines per 16 channels) against 4 vectors of packed
//! weights, and stores 4 runs of up to 6 x 16 contiguous values. On this project's
//! machine (Intel, AVX-512), per layer inside ResNet-50, it took 0.76-0.86 of the NCHW
//! kernels' time on 1x1 layers over 14x14 to 56x56 planes and 0.67-0.89 on 3x3 ones, and
//! the whole model went from 1.53 to 1.24 of onnxruntime's time (whose own blocked path
//! runs it 1.65x faster than its NCHW one there).
//!
//! The weights are the filter panels of [`filter_panels`](super::filter_panels),
//! `[ceil(F / 64), C, kh, kw, 64]`, packed at load. The input is read in place when it is
//! blocked and the convolution has no padding; otherwise (padding, or an NCHW input: a
//! network's first convolution, over 3 channels) it is first copied into a zero-padded
//! blocked buffer, so that the tiles need no bounds checks. Segments of the output plane
//! are shared out over the tasks (a task that is done takes what the others have not
//! started), every panel of a segment to one task where the weights allow (see
//! [`UnitOrder`]); the tiles of a segment sum a pass of channel blocks (as many as keep
//! their weights in the level-1 cache) into the output and resume from there.

use super::bf16_panels::Bf16Isa;
use super::caches::LINE_VALUES;
use super::conv_operands::{Conv2d, Operands, PerFilter};
use super::epilogue::Epilogue;
use super::panels::PANEL;
use super::parallel::{chunk, for_each_unit, Launch, Shared, UnitOrder, INLINE_WORK};
use super::scratch::{prefix, reuse};
use super::simd::Isa;

pub(crate) mod bf16;

/// Channels per block: one AVX-512 vector of float32.
pub(crate) const BLOCK: usize = 16;

/// What the tiles multiply, and with which instructions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arithmetic {
    /// float32 values, the weights in filter panels.
    F32(Isa),
    /// bf16 pairs of channels summed in float32 (see [`bf16`]): the input rounded into
    /// the padded buffer, the weights in filter panels of pairs.
    Bf16(Bf16Isa),
}

impl Arithmetic {
    /// The slots (float32 values, or 32-bit words of two bf16 values) that hold one
    /// pixel's 16 channels of a block, in the source and in a panel's weights per tap.
    fn lanes(self) -> usize {
        match self {
            Arithmetic::F32(_) => BLOCK,
            Arithmetic::Bf16(_) => BLOCK / 2,
        }
    }
}

/// Output pixels per tile of `vectors` blocks of 16 filters: 24 accumulators, the weight
/// vectors and a broadcast fit AVX-512's 32 registers (a panel of 64 filters: 6 pixels; of
/// 32, DenseNet's 3x3 layers: 12). AMX's tiles sum 16 pixels, a tile register's rows.
fn pixels_per_tile(vectors: usize, arithmetic: Arithmetic) -> usize {
    match arithmetic {
        Arithmetic::Bf16(Bf16Isa::Amx) => bf16::AMX_PIXELS,
        _ => MAX_PIXELS_PER_TILE / vectors.max(1),
    }
}

/// Pixels of a tile of one block of filters.
const MAX_PIXELS_PER_TILE: usize = 24;

/// Tiles of a segment, at most: those of 6 pixels (a panel of 64 filters).
const MAX_TILES: usize = SEGMENT.div_ceil(MAX_PIXELS_PER_TILE / (PANEL / BLOCK));

/// Output pixels per unit of work (the plane's pixels, row-major, split in such
/// segments): the segment's output, 64 filters x 72 pixels (18 KiB), stays in the
/// level-1 cache while its tiles sum one group of channel blocks after another. Tiles run
/// across rows (a tile's pixels each read their own input) and split a segment evenly:
/// tiles within rows left a tile of 1 pixel in each row of a 7x7 plane, and took 1.16-1.19x
/// the time on ResNet-50's 7x7 layers, 1.01-1.10x on the others (one thread, in one
/// process).
pub(super) const SEGMENT: usize = 72;

/// Units of work (panels x segments) a convolution is split into at least, where its
/// plane allows: a few for each core. A 7x7 plane is one segment: a layer of 160 filters
/// (3 panels) was 3 units, of which one of the 2 cores ran 2 while the other waited.
const MIN_UNITS: usize = 8;

/// Output pixels of a segment at least: two tiles of a panel of 64 filters.
const MIN_SEGMENT: usize = 12;

/// Output pixels per segment of a plane of `pixels`, whose filters fill `panels` panels:
/// at most [`SEGMENT`], and fewer where that makes [`MIN_UNITS`] units of segments of at
/// least [`MIN_SEGMENT`] (each segment reads its panel's weights again, from the level-2
/// cache); the segments of near-equal sizes.
fn segment_pixels(pixels: usize, panels: usize) -> usize {
    let wanted = MIN_UNITS.div_ceil(panels.max(1)).min(pixels / MIN_SEGMENT);
    let segments = pixels.div_ceil(SEGMENT).max(wanted).max(1);
    pixels.div_ceil(segments).max(1)
}

/// The most weights (bytes) that the tiles of a segment sum over before they store their
/// sums and resume with the next channels: the weights of a pass are read by every tile
/// of the segment, so they should stay in the level-1 cache (48 KiB here) beside the
/// tiles' inputs. A 1x1 kernel's panel passes 8 blocks of 16 channels (32 KiB), a 3x3
/// kernel's one block (36 KiB: never less than one). Against 4 blocks a pass for every
/// kernel (a 3x3 kernel's 147 KiB), one thread, alternating runs: ResNet-50's 3x3 layer
/// over 7x7 planes went from 70 to 75-76 GFLOP/s, its 1x1 layers ran 1.00-1.09x as fast.
const PASS_WEIGHTS: usize = 32 * 1024;

/// The most weights (bytes) of a pass on AMX's tiles: 8 times [`PASS_WEIGHTS`], from the
/// level-2 cache. Against 1, 4 and 16 times, one core, Intel Xeon with AMX
/// (`cargo bench -p relax-kernels --bench layers -- ResNet-50`): ResNet-50's 3x3 layers
/// ran at 666-752 GFLOP/s over 28x28 and 56x56 planes against 556-601 with 1 and
/// 621-640 with 4, and its 1x1 layer of 1024 channels at 512 against 405 with 1 (16
/// times was no better).
const AMX_PASS_WEIGHTS: usize = 8 * PASS_WEIGHTS;

/// Blocks of channels a pass sums, for a kernel of `kernel_size` taps (see
/// [`PASS_WEIGHTS`]).
fn blocks_per_pass(kernel_size: usize, arithmetic: Arithmetic) -> usize {
    let pass_weights = match arithmetic {
        Arithmetic::Bf16(Bf16Isa::Amx) => AMX_PASS_WEIGHTS,
        _ => PASS_WEIGHTS,
    };
    let block_weights = kernel_size * arithmetic.lanes() * PANEL * std::mem::size_of::<f32>();
    (pass_weights / block_weights.max(1)).max(1)
}

thread_local! {
    /// The zero-padded blocked input of the convolutions called on this thread.
    static PADDED: std::cell::RefCell<Vec<f32>> = std::cell::RefCell::default();
}

/// Where one image's (blocked, maybe padded) input lies: pixel `(y, x)` of block `b` at
/// `data + ((b * height + y) * width + x) * lanes` (the arithmetic's
/// [`lanes`](Arithmetic::lanes)), in padded coordinates.
#[derive(Clone, Copy)]
pub(super) struct Source {
    pub(super) data: Shared,
    pub(super) height: usize,
    pub(super) width: usize,
}

/// Where the weights of filter `f` of panel `p` for channel `c` (in bf16, the pair of
/// channels `c`) and tap `t` lie: at `panel_stride * p + channel_stride * c + 64 t + f`.
#[derive(Clone, Copy)]
pub(super) struct WeightStrides {
    pub(super) panel: usize,
    pub(super) channel: usize,
}

impl WeightStrides {
    /// Those of filter panels (`[ceil(F / 64), C, kh, kw, 64]`; of pairs, `[ceil(F / 64),
    /// C / 2, kh, kw, 64]`).
    fn filter_panels(shape: &Conv2d, arithmetic: Arithmetic) -> WeightStrides {
        let kernel_size = shape.kernel.0 * shape.kernel.1;
        let slots = match arithmetic {
            Arithmetic::F32(_) => shape.channels,
            Arithmetic::Bf16(_) => shape.channels.div_ceil(2),
        };
        WeightStrides {
            panel: slots * kernel_size * PANEL,
            channel: kernel_size * PANEL,
        }
    }
}

/// What the tiles of one image share.
pub(super) struct ImageTiles<'a> {
    pub(super) shape: &'a Conv2d,
    pub(super) source: Source,
    /// Offsets (values) of each kernel tap from a pixel's first input, in the source.
    pub(super) taps: &'a [usize],
    /// The convolution's kernel, in panels of 64 filters laid out as `strides` say.
    pub(super) panels: Shared,
    pub(super) strides: WeightStrides,
    /// This image's output, `[F / 16, OH, OW, 16]`.
    pub(super) out: Shared,
    pub(super) residual: Option<Shared>,
    pub(super) per_filter: Option<PerFilter<'a>>,
    pub(super) epilogue: Epilogue,
    pub(super) output: (usize, usize),
    pub(super) arithmetic: Arithmetic,
}

/// `out = epilogue(conv2d(x, w) * scale + shift + residual)` with `out` (and `residual`)
/// blocked, `x` blocked (`input_blocked`) or NCHW, `w` in filter panels (bf16: of pairs,
/// and `x` blocked); with the tiles of `arithmetic`.
///
/// # Safety
/// `x` holds `shape.batch` images of `shape.channels` channels (blocked: `[C / 16, H, W,
/// 16]` each, so `C` is a multiple of 16), `w` the panels of `shape.filters` filters
/// (a multiple of 16), `out` and `residual` `[N, F / 16, OH, OW, 16]`, `per_filter` a value
/// per filter; all valid for the call, and `out` overlaps none of the others. One group.
/// `arithmetic`'s instructions run on this CPU ([`Isa::runs_here`],
/// [`Bf16Isa::runs_here`]).
pub(crate) unsafe fn blocked_conv(
    shape: &Conv2d,
    input_blocked: bool,
    arithmetic: Arithmetic,
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
    let (top, left, bottom, right) = shape.padding;
    let blocks = shape.channels.div_ceil(BLOCK);
    let lanes = arithmetic.lanes();
    let bf16 = matches!(arithmetic, Arithmetic::Bf16(_));
    if bf16 && !input_blocked {
        return Err("a bf16 convolution takes a blocked input".into());
    }
    // bf16 reads its input rounded, in the buffer, padded or not.
    let padded = (top, left, bottom, right) != (0, 0, 0, 0) || !input_blocked || bf16;
    let too_large = || "the padded input is too large".to_string();
    let (height, width) = if padded {
        (
            // (`output()` above checked that these sums do not overflow.)
            shape.height + top + bottom,
            shape.width + left + right,
        )
    } else {
        (shape.height, shape.width)
    };
    // The padded buffer's values (none when the input is read in place).
    let padded_len = if padded {
        [height, width, lanes]
            .into_iter()
            .try_fold(blocks, usize::checked_mul)
            .ok_or_else(too_large)?
    } else {
        0
    };
    let (kernel_h, kernel_w) = shape.kernel;
    let taps: Vec<usize> = (0..kernel_h * kernel_w)
        .map(|tap| {
            let (ky, kx) = (tap / kernel_w, tap % kernel_w);
            (ky * shape.dilation.0 * width + kx * shape.dilation.1) * lanes
        })
        .collect();
    let input_image = shape.channels * shape.height * shape.width;
    let output_image = shape.filters * output_height * output_width;
    let panels = shape.filters.div_ceil(PANEL);
    let output_pixels = output_height * output_width;
    let segment = segment_pixels(output_pixels, panels);
    let segments = output_pixels.div_ceil(segment);
    let units = panels * segments;
    let work = shape.filters * output_height * output_width * shape.channels * taps.len();
    let order = UnitOrder::of(
        shape.filters * shape.channels * taps.len(),
        input_image + output_image,
    );
    let x = Shared(x.cast_mut());
    let residual = residual.map(|residual| Shared(residual.cast_mut()));
    reuse(&PADDED, |buffer| {
        let buffer = Shared(prefix(buffer, padded_len).as_mut_ptr());
        for image in 0..shape.batch {
            let image_x = Shared(x.at(image * input_image));
            let source = if padded {
                launch(input_image < INLINE_WORK, &|task, tasks| {
                    // Shared out as the tiles share out the output (see `UnitOrder`).
                    let (blocks, rows) = match order {
                        UnitOrder::Pixels => (0..blocks, chunk(height, tasks, task, 1)),
                        UnitOrder::Panels => (chunk(blocks, tasks, task, 1), 0..height),
                    };
                    for block in blocks {
                        // SAFETY: the image's input, read only; these rows of block `block`
                        // of the padded buffer, this task's alone (`chunk` ranges do not
                        // overlap).
                        unsafe {
                            pad_rows(
                                shape,
                                input_blocked,
                                image_x,
                                (block, rows.clone()),
                                buffer,
                                (height, width),
                                arithmetic,
                            )
                        };
                    }
                })?;
                Source {
                    data: buffer,
                    height,
                    width,
                }
            } else {
                Source {
                    data: image_x,
                    height,
                    width,
                }
            };
            let tiles = ImageTiles {
                shape,
                source,
                taps: &taps,
                panels: Shared(w.cast_mut()),
                strides: WeightStrides::filter_panels(shape, arithmetic),
                out: Shared(out.at(image * output_image)),
                residual: residual.map(|residual| Shared(residual.at(image * output_image))),
                per_filter,
                epilogue,
                output: (output_height, output_width),
                arithmetic,
            };
            for_each_unit(launch, work < INLINE_WORK, units, &|unit| {
                let (panel, index) = order.split(unit, panels, segments);
                let pixels = index * segment..((index + 1) * segment).min(output_pixels);
                // SAFETY: the segment of this panel's filters is this unit's, and each unit
                // runs once; everything else is read only (the function's contract).
                unsafe { tiles.compute(panel, pixels) };
            })?;
        }
        Ok(())
    })
}

/// Copies padded rows `rows` of block `block` of one image's input (blocked or NCHW) into
/// the zero-padded blocked buffer `buffer` (`height x width` padded pixels per block);
/// channels past `shape.channels` are zeros. In bf16 (a blocked input), each pixel's
/// channels are rounded into 8 words of pairs.
///
/// # Safety
/// `x` holds the image, `buffer` the padded blocks; `rows` are inside `0..height`, and no
/// other thread writes these rows of this block.
unsafe fn pad_rows(
    shape: &Conv2d,
    input_blocked: bool,
    x: Shared,
    (block, rows): (usize, std::ops::Range<usize>),
    buffer: Shared,
    (height, width): (usize, usize),
    arithmetic: Arithmetic,
) {
    if let Arithmetic::Bf16(isa) = arithmetic {
        // SAFETY: the caller's contract (a blocked input in bf16).
        unsafe { bf16::pad_rows(shape, x, (block, rows), buffer, (height, width), isa) };
        return;
    }
    let (top, left, _, _) = shape.padding;
    let row_len = width * BLOCK;
    // SAFETY: these rows of block `block` of the buffer, this task's alone.
    let padded = unsafe {
        std::slice::from_raw_parts_mut(
            buffer.at((block * height + rows.start) * row_len),
            rows.len() * row_len,
        )
    };
    let plane = shape.height * shape.width;
    for (y, row) in rows.zip(padded.chunks_exact_mut(row_len)) {
        let inside = y >= top && y - top < shape.height;
        if !inside {
            row.fill(0.0);
            continue;
        }
        let source_y = y - top;
        row[..left * BLOCK].fill(0.0);
        row[(left + shape.width) * BLOCK..].fill(0.0);
        let pixels = &mut row[left * BLOCK..(left + shape.width) * BLOCK];
        if input_blocked {
            let start = (block * plane + source_y * shape.width) * BLOCK;
            // SAFETY: the source row of this block, inside the image.
            let source = unsafe {
                std::slice::from_raw_parts(x.at(start).cast_const(), shape.width * BLOCK)
            };
            pixels.copy_from_slice(source);
            continue;
        }
        // NCHW: gather the block's channels of each pixel.
        let channels = (shape.channels - block * BLOCK).min(BLOCK);
        if channels < BLOCK {
            pixels.fill(0.0);
        }
        for lane in 0..channels {
            let start = (block * BLOCK + lane) * plane + source_y * shape.width;
            // SAFETY: the source row of this channel, inside the image.
            let source =
                unsafe { std::slice::from_raw_parts(x.at(start).cast_const(), shape.width) };
            for (pixel, value) in source.iter().enumerate() {
                pixels[pixel * BLOCK + lane] = *value;
            }
        }
    }
}

impl ImageTiles<'_> {
    /// Computes output pixels `pixels` (row-major) of panel `panel`'s filters.
    ///
    /// # Safety
    /// As [`blocked_conv`]; that output is written by no other thread.
    pub(super) unsafe fn compute(&self, panel: usize, pixels: std::ops::Range<usize>) {
        let shape = self.shape;
        let (output_height, output_width) = self.output;
        let vectors = ((shape.filters - panel * PANEL) / BLOCK).min(PANEL / BLOCK);
        let blocks = shape.channels.div_ceil(BLOCK);
        let kernel_size = shape.kernel.0 * shape.kernel.1;
        let first_filter = panel * PANEL;
        let lanes = self.arithmetic.lanes();
        // Whether output pixel `p` reads input pixel `p` of the source (a 1x1 layer of
        // stride 1 without padding): the segment's pixels then read consecutive pixels.
        let consecutive = shape.stride == (1, 1) && self.source.width == output_width;
        // Each tile's pixels, from the segment's first: tiles of near-equal sizes (49
        // pixels: 4 of 6 and 5 of 5, not 8 of 6 and 1 of 1); on AMX, within output rows
        // where that takes at most `MAX_TILES` (see `amx_row_spans`).
        let amx_rows = match self.arithmetic {
            Arithmetic::Bf16(Bf16Isa::Amx) if !consecutive && output_width >= bf16::AMX_PIXELS => {
                amx_row_spans(&pixels, output_width)
            }
            _ => None,
        };
        let (tiles, spans) = amx_rows.unwrap_or_else(|| {
            let tiles = pixels
                .len()
                .div_ceil(pixels_per_tile(vectors, self.arithmetic));
            let spans = std::array::from_fn(|tile_index| chunk(pixels.len(), tiles, tile_index, 1));
            (tiles, spans)
        });
        debug_assert!(tiles <= MAX_TILES);
        // Each tile's output pixels' first inputs (tap (0, 0)) in a block of the source,
        // the same for every pass: worked out per pass (two divisions a pixel) and copied
        // into each tile, they cost about a tenth of a pass of one block of a 3x3 kernel.
        let mut inputs = [[0usize; MAX_PIXELS_PER_TILE]; MAX_TILES];
        if consecutive {
            for (inputs, span) in inputs.iter_mut().zip(&spans).take(tiles) {
                let first = pixels.start + span.start;
                for (pixel, slot) in inputs.iter_mut().enumerate().take(span.len()) {
                    *slot = (first + pixel) * lanes;
                }
            }
        } else {
            // Column by column, a step at a time (a multiply a pixel, on a dependency
            // chain, took a fifth of the time of a 1x1 layer of 32 channels).
            let (column_step, row_step) = (
                shape.stride.1 * lanes,
                shape.stride.0 * self.source.width * lanes,
            );
            let (row, mut column) = (pixels.start / output_width, pixels.start % output_width);
            let mut row_start = row * row_step;
            let mut input = row_start + column * column_step;
            for (inputs, span) in inputs.iter_mut().zip(&spans).take(tiles) {
                for slot in inputs.iter_mut().take(span.len()) {
                    *slot = input;
                    column += 1;
                    input += column_step;
                    if column == output_width {
                        column = 0;
                        row_start += row_step;
                        input = row_start;
                    }
                }
            }
        }
        // Whether each tile's pixels read consecutive pixels (see `Tile::contiguous`), the
        // same for every pass.
        let contiguous: [bool; MAX_TILES] = std::array::from_fn(|tile_index| {
            let inputs = &inputs[tile_index];
            consecutive
                || (1..spans[tile_index].len())
                    .all(|pixel| inputs[pixel] == inputs[0] + pixel * lanes)
        });
        let group = blocks_per_pass(kernel_size, self.arithmetic);
        let panel_weights = panel * self.strides.panel;
        for first_block in (0..blocks).step_by(group) {
            let count = group.min(blocks - first_block);
            let last = first_block + count == blocks;
            // The next pass's weights, in cache lines shared out over the tiles (see
            // `Tile::next`): in a panel's first segment, which reads them first (the
            // others find them in the level-2 cache; by pixels, the other cores' first
            // segments read them unfetched, once).
            let next_block = first_block + count;
            let next_lines = if pixels.start == 0 {
                (group.min(blocks - next_block) * lanes * self.strides.channel)
                    .div_ceil(LINE_VALUES)
            } else {
                0
            };
            let lines_per_tile = next_lines.div_ceil(tiles);
            for (tile_index, (inputs, tile_pixels)) in
                inputs.iter().zip(&spans).take(tiles).enumerate()
            {
                let next_first = (tile_index * lines_per_tile).min(next_lines);
                let first_pixel = pixels.start + tile_pixels.start;
                // The tile's first output value (and residual value), in this image.
                let offset =
                    (panel * (PANEL / BLOCK) * output_height * output_width + first_pixel) * BLOCK;
                let tile = Tile {
                    x: self
                        .source
                        .data
                        .at(first_block * self.source.height * self.source.width * lanes)
                        .cast_const(),
                    inputs,
                    block_stride: self.source.height * self.source.width * lanes,
                    taps: self.taps,
                    blocks: count,
                    channels: shape.channels - first_block * BLOCK,
                    // The panel's weights of channel `first_block * 16`, tap 0.
                    w: self
                        .panels
                        .at(panel_weights + first_block * lanes * self.strides.channel)
                        .cast_const(),
                    // An address past the panel (even past the weights) when there is no
                    // next pass: never read, hence computed with `wrapping_add`.
                    next: self.panels.get().cast_const().wrapping_add(
                        panel_weights
                            + next_block * lanes * self.strides.channel
                            + next_first * LINE_VALUES,
                    ),
                    next_lines: lines_per_tile.min(next_lines - next_first),
                    channel_stride: self.strides.channel,
                    out: Shared(self.out.at(offset)),
                    block_out_stride: output_height * output_width * BLOCK,
                    resume: first_block > 0,
                    pixels: tile_pixels.len(),
                    vectors,
                    contiguous: contiguous[tile_index],
                };
                let finish = last.then(|| Finish {
                    scale: self
                        .per_filter
                        .and_then(|per_filter| per_filter.scale)
                        .map(|scale| &scale[first_filter..]),
                    shift: self
                        .per_filter
                        .map(|per_filter| &per_filter.shift[first_filter..]),
                    residual: self.residual.map(|residual| Shared(residual.at(offset))),
                    clamp: self.epilogue.bounds(),
                });
                // SAFETY: the tile's output lies in this task's segment; its operands in
                // the checked tensors (the function's contract).
                unsafe {
                    match self.arithmetic {
                        #[cfg(target_arch = "x86_64")]
                        Arithmetic::F32(Isa::Avx512) => avx512::tile(&tile, finish.as_ref()),
                        #[cfg(target_arch = "x86_64")]
                        Arithmetic::F32(Isa::Avx2) => avx2::tile(&tile, finish.as_ref()),
                        Arithmetic::F32(_) => portable_tile(&tile, finish.as_ref()),
                        Arithmetic::Bf16(isa) => bf16::tile(&tile, finish.as_ref(), isa),
                    }
                }
                if last && self.epilogue.after_registers() {
                    for vector in 0..vectors {
                        // SAFETY: the run this tile just stored, this task's alone.
                        let values = unsafe {
                            std::slice::from_raw_parts_mut(
                                tile.out.at(vector * tile.block_out_stride),
                                tile.pixels * BLOCK,
                            )
                        };
                        self.epilogue.apply(values);
                    }
                }
            }
        }
    }
}

/// The AMX tiles of output pixels `pixels` (row-major, rows of `width`): each output row's
/// pixels in the segment split in near-equal tiles of at most 16, none across rows, so
/// that a tile's inputs lie a constant stride apart and load as one tile register; `None`
/// where that takes more than `MAX_TILES` (planes a few pixels wide). Tiles across rows
/// copy their inputs per block and tap first: on ResNet-50's 3x3 layers over 28x28 and
/// 56x56, one core, copying for every tile took them from 700-735 and 579-592 GFLOP/s to
/// 595-602 and 474-497; within rows they ran at 789-858 and 664-708. Only for rows of a
/// whole tile or more: over 14x14 tiles of 14 ran as fast as copied ones (575), and over
/// 7x7 tiles of 7 at 313-329 against 455-476 copied (half-empty tile registers).
fn amx_row_spans(
    pixels: &std::ops::Range<usize>,
    width: usize,
) -> Option<(usize, [std::ops::Range<usize>; MAX_TILES])> {
    let mut spans: [std::ops::Range<usize>; MAX_TILES] = std::array::from_fn(|_| 0..0);
    let mut count = 0;
    let mut start = pixels.start;
    while start < pixels.end {
        let end = ((start / width + 1) * width).min(pixels.end);
        let pieces = (end - start).div_ceil(bf16::AMX_PIXELS);
        for piece in 0..pieces {
            let span = chunk(end - start, pieces, piece, 1);
            let first = start - pixels.start;
            *spans.get_mut(count)? = first + span.start..first + span.end;
            count += 1;
        }
        start = end;
    }
    Some((count, spans))
}

/// One tile: `vectors` (1-4) blocks of 16 filters x `pixels` (up to
/// [`pixels_per_tile`]) output pixels.
struct Tile<'a> {
    /// The source's first block summed.
    x: *const f32,
    /// Each output pixel's input (tap (0, 0)) from `x`, in values.
    inputs: &'a [usize; MAX_PIXELS_PER_TILE],
    block_stride: usize,
    taps: &'a [usize],
    /// Blocks of channels summed.
    blocks: usize,
    /// Channels from the first block summed to the last channel (the last block may be
    /// partial: an NCHW input of 3 channels).
    channels: usize,
    /// Weight `(channel c of the summed ones, tap t, filter f of the panel)` at
    /// `w[c * channel_stride + t * 64 + f]`.
    w: *const f32,
    channel_stride: usize,
    /// This tile's share of the cache lines of the next pass's weights, from `next`: the
    /// AVX-512 tile prefetches them into the level-2 cache as it goes, a few for each tap
    /// of each block. Without, the first tile of each pass waited on every line of its
    /// weights: a 1x1 layer over a 7x7 plane (whose weights outweigh its inputs) took 1.7x
    /// as long with its weights out of the caches as in them (one thread). In
    /// MobileNetV2, 2 threads, alternating runs, its 1x1 layers over 7x7 planes took
    /// 0.85-0.96x the time with this and their planes split in 8 units (see
    /// `MIN_UNITS`).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // Read by the AVX-512 tile.
    next: *const f32,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    next_lines: usize,
    /// Output `(block v, pixel p, lane)` at `out[v * block_out_stride + p * 16 + lane]`.
    out: Shared,
    block_out_stride: usize,
    /// Whether to add to the sums stored in `out` (by the tile's earlier blocks).
    resume: bool,
    pixels: usize,
    vectors: usize,
    /// Whether pixel `p`'s inputs are `p` pixels (16 p values, or 8 p words in bf16) after
    /// the first pixel's (a 1x1 layer of stride 1 without padding, or a tile within one
    /// row of a layer of stride 1): the AVX-512 tile then reads them all from one address
    /// and offsets the compiler folds into the instructions, where an address per pixel
    /// takes more registers than there are (24 pixels of one block of filters).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // Read by the AVX-512 tiles.
    contiguous: bool,
}

/// What the last pass of a tile applies in registers: `sum * scale + shift + residual`,
/// then a clamp (each part optional; `scale` and `shift` from the panel's first filter).
struct Finish<'a> {
    scale: Option<&'a [f32]>,
    shift: Option<&'a [f32]>,
    /// Laid out as `out` (offset of the tile's output).
    residual: Option<Shared>,
    clamp: Option<(f32, f32)>,
}

/// A tile's share of the next pass's weights (see [`Tile::next`]), prefetched into the
/// level-2 cache a few lines at each tap of each block it sums.
#[cfg(target_arch = "x86_64")]
struct NextPass {
    next: *const f32,
    lines: usize,
    per_tap: usize,
    done: usize,
}

#[cfg(target_arch = "x86_64")]
impl NextPass {
    fn of(tile: &Tile<'_>) -> NextPass {
        NextPass {
            next: tile.next,
            lines: tile.next_lines,
            per_tap: tile.next_lines.div_ceil(tile.blocks * tile.taps.len()),
            done: 0,
        }
    }

    /// Prefetches the lines of one more tap.
    #[inline(always)]
    fn tap(&mut self) {
        let end = (self.done + self.per_tap).min(self.lines);
        for line in self.done..end {
            // A hint only: a prefetch of any address is sound (a partial last block's
            // lines run past the panel's channels).
            // SAFETY: `prefetcht1` is SSE, which every x86-64 CPU has.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(
                    self.next.wrapping_add(line * LINE_VALUES).cast(),
                )
            };
        }
        self.done = end;
    }
}

/// The tile on any CPU: the same sums, on plain arrays that the compiler vectorizes.
///
/// # Safety
/// As [`blocked_conv`], for this tile.
unsafe fn portable_tile(tile: &Tile<'_>, finish: Option<&Finish<'_>>) {
    let width = tile.vectors * BLOCK;
    // SAFETY: the caller's contract.
    let mut sums = unsafe { portable_start(tile) };
    for block in 0..tile.blocks {
        let channels = (tile.channels - block * BLOCK).min(BLOCK);
        for (t, &tap) in tile.taps.iter().enumerate() {
            for channel in 0..channels {
                // SAFETY: the weights of this channel and tap, inside the panel.
                let weights = unsafe {
                    std::slice::from_raw_parts(
                        tile.w
                            .add((block * BLOCK + channel) * tile.channel_stride + t * PANEL),
                        width,
                    )
                };
                for (pixel, sums) in sums.iter_mut().enumerate().take(tile.pixels) {
                    // SAFETY: the input of this pixel, tap and channel, inside the source.
                    let value = unsafe {
                        *tile
                            .x
                            .add(block * tile.block_stride + tile.inputs[pixel] + tap + channel)
                    };
                    accumulate_row(&mut sums[..width], weights, value);
                }
            }
        }
    }
    // SAFETY: the caller's contract.
    unsafe { portable_store(tile, finish, &sums) };
}

/// The sums a portable tile starts from: where the tile's earlier passes left them (or
/// zero), per pixel and filter of the panel.
///
/// # Safety
/// As [`blocked_conv`], for this tile.
unsafe fn portable_start(tile: &Tile<'_>) -> [[f32; PANEL]; MAX_PIXELS_PER_TILE] {
    let width = tile.vectors * BLOCK;
    let mut sums = [[0f32; PANEL]; MAX_PIXELS_PER_TILE];
    for (pixel, sums) in sums.iter_mut().enumerate().take(tile.pixels) {
        for (lane, sum) in sums.iter_mut().enumerate().take(width) {
            let (vector, within) = (lane / BLOCK, lane % BLOCK);
            *sum = if tile.resume {
                // SAFETY: inside the tile's output (the caller's contract).
                unsafe {
                    *tile
                        .out
                        .at(vector * tile.block_out_stride + pixel * BLOCK + within)
                }
            } else {
                0.0
            };
        }
    }
    sums
}

/// `finish` (when given) on a portable tile's sums, stored in the tile's output.
///
/// # Safety
/// As [`blocked_conv`], for this tile.
unsafe fn portable_store(
    tile: &Tile<'_>,
    finish: Option<&Finish<'_>>,
    sums: &[[f32; PANEL]; MAX_PIXELS_PER_TILE],
) {
    let width = tile.vectors * BLOCK;
    for (pixel, sums) in sums.iter().enumerate().take(tile.pixels) {
        for (lane, &sum) in sums.iter().enumerate().take(width) {
            let (vector, within) = (lane / BLOCK, lane % BLOCK);
            let offset = vector * tile.block_out_stride + pixel * BLOCK + within;
            let mut value = sum;
            if let Some(finish) = finish {
                value = value * finish.scale.map_or(1.0, |scale| scale[lane])
                    + finish.shift.map_or(0.0, |shift| shift[lane]);
                if let Some(residual) = finish.residual {
                    // SAFETY: the residual has the output's layout.
                    value += unsafe { *residual.at(offset) };
                }
                if let Some((low, high)) = finish.clamp {
                    value = value.max(low).min(high);
                }
            }
            // SAFETY: inside the tile's output.
            unsafe { *tile.out.at(offset) = value };
        }
    }
}

super::simd::multiversion! {
    /// `sums += weights * value`.
    fn accumulate_row(sums: &mut [f32], weights: &[f32], value: f32) {
        sums.iter_mut().zip(weights).for_each(|(sum, weight)| *sum += weight * value);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Finish, Tile, BLOCK, PANEL};

    /// Output pixels summed together for one block of 16 filters (two vectors of 8): 12
    /// accumulators, the block's two weight vectors and a broadcast input fill 15 of the
    /// 16 registers.
    const PIXELS: usize = 6;

    /// Computes `tile` (with `finish` on its last pass) and stores it: each of its blocks
    /// of filters in runs of up to 6 pixels.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; as `blocked_conv`, for this tile.
    pub(super) unsafe fn tile(tile: &Tile<'_>, finish: Option<&Finish<'_>>) {
        for vector in 0..tile.vectors {
            for first in (0..tile.pixels).step_by(PIXELS) {
                let run = (first, vector);
                // SAFETY: the caller's contract; the run's pixels are the tile's.
                unsafe {
                    match PIXELS.min(tile.pixels - first) {
                        1 => sums::<1>(tile, run, finish),
                        2 => sums::<2>(tile, run, finish),
                        3 => sums::<3>(tile, run, finish),
                        4 => sums::<4>(tile, run, finish),
                        5 => sums::<5>(tile, run, finish),
                        _ => sums::<6>(tile, run, finish),
                    }
                }
            }
        }
    }

    /// `P` pixels from the tile's pixel `first` x the 16 filters of its block `vector`:
    /// the sums from where the tile's earlier passes left them (or zero), then `finish`
    /// and the stores, in one function so that the accumulators stay in registers.
    ///
    /// # Safety
    /// As `tile`; `first + P <= tile.pixels`, `vector < tile.vectors`.
    #[target_feature(enable = "avx2,fma")]
    #[inline(never)]
    unsafe fn sums<const P: usize>(
        tile: &Tile<'_>,
        (first, vector): (usize, usize),
        finish: Option<&Finish<'_>>,
    ) {
        // SAFETY: the function's contract: every input, weight and output addressed lies
        // in its checked tensor or the padded buffer.
        unsafe {
            let out = tile.out.at(vector * tile.block_out_stride + first * BLOCK);
            let mut sums: [[__m256; 2]; P] = if tile.resume {
                std::array::from_fn(|pixel| {
                    let at = out.add(pixel * BLOCK);
                    [_mm256_loadu_ps(at), _mm256_loadu_ps(at.add(8))]
                })
            } else {
                [[_mm256_setzero_ps(); 2]; P]
            };
            for block in 0..tile.blocks {
                let channels = (tile.channels - block * BLOCK).min(BLOCK);
                let x = tile.x.add(block * tile.block_stride);
                let w = tile
                    .w
                    .add(block * BLOCK * tile.channel_stride + vector * BLOCK);
                for (t, &tap) in tile.taps.iter().enumerate() {
                    let inputs: [*const f32; P] =
                        std::array::from_fn(|pixel| x.add(tile.inputs[first + pixel] + tap));
                    let weights = w.add(t * PANEL);
                    let mut step = |channel: usize| {
                        let row = weights.add(channel * tile.channel_stride);
                        let (low, high) = (_mm256_loadu_ps(row), _mm256_loadu_ps(row.add(8)));
                        for (sums, input) in sums.iter_mut().zip(&inputs) {
                            let a = _mm256_broadcast_ss(&*input.add(channel));
                            sums[0] = _mm256_fmadd_ps(a, low, sums[0]);
                            sums[1] = _mm256_fmadd_ps(a, high, sums[1]);
                        }
                    };
                    if channels == BLOCK {
                        for channel in 0..BLOCK {
                            step(channel);
                        }
                    } else {
                        for channel in 0..channels {
                            step(channel);
                        }
                    }
                }
            }
            for half in 0..2 {
                let lanes = vector * BLOCK + half * 8;
                let per_filter = |values: Option<&[f32]>| {
                    values.map(|values| _mm256_loadu_ps(values.as_ptr().add(lanes)))
                };
                let (scale, shift) = match finish {
                    Some(finish) => (per_filter(finish.scale), per_filter(finish.shift)),
                    None => (None, None),
                };
                for (pixel, sums) in sums.iter().enumerate() {
                    let offset = pixel * BLOCK + half * 8;
                    let mut value = sums[half];
                    if let Some(finish) = finish {
                        if let Some(scale) = scale {
                            value = _mm256_mul_ps(value, scale);
                        }
                        if let Some(shift) = shift {
                            value = _mm256_add_ps(value, shift);
                        }
                        if let Some(residual) = finish.residual {
                            let at = vector * tile.block_out_stride + first * BLOCK + offset;
                            value = _mm256_add_ps(value, _mm256_loadu_ps(residual.at(at)));
                        }
                        if let Some((low, high)) = finish.clamp {
                            value = _mm256_min_ps(
                                _mm256_max_ps(value, _mm256_set1_ps(low)),
                                _mm256_set1_ps(high),
                            );
                        }
                    }
                    _mm256_storeu_ps(out.add(offset), value);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{Finish, Tile, BLOCK, PANEL};

    /// The AVX-512 tiles of one arithmetic: `sums::<P, V>` computes and stores a tile of
    /// `P` pixels x `V` blocks of 16 filters.
    pub(super) trait Sums {
        /// # Safety
        /// The CPU runs the arithmetic's instructions; as `blocked_conv`, for this tile
        /// (of `P` pixels and `V` vectors).
        unsafe fn sums<const P: usize, const V: usize>(
            tile: &Tile<'_>,
            finish: Option<&Finish<'_>>,
        );
    }

    /// The float32 tiles.
    struct F32;

    impl Sums for F32 {
        unsafe fn sums<const P: usize, const V: usize>(
            tile: &Tile<'_>,
            finish: Option<&Finish<'_>>,
        ) {
            // SAFETY: the caller's contract.
            unsafe { sums::<P, V>(tile, finish) }
        }
    }

    /// Computes `tile` (with `finish` on its last pass) and stores it.
    ///
    /// # Safety
    /// The CPU has AVX-512F; as `blocked_conv`, for this tile.
    pub(super) unsafe fn tile(tile: &Tile<'_>, finish: Option<&Finish<'_>>) {
        // SAFETY: the caller's contract.
        unsafe { by_shape::<F32>(tile, finish) }
    }

    /// `S::sums` monomorphized for the tile's pixels and vectors.
    ///
    /// # Safety
    /// As `S::sums`.
    pub(super) unsafe fn by_shape<S: Sums>(tile: &Tile<'_>, finish: Option<&Finish<'_>>) {
        macro_rules! pixels {
            ($vectors:literal; $($pixels:literal)*) => {
                match tile.pixels {
                    $($pixels => S::sums::<$pixels, $vectors>(tile, finish),)*
                    _ => unreachable!("a tile of {} vectors has up to {} pixels", $vectors, 24 / $vectors),
                }
            };
        }
        // SAFETY: the caller's contract.
        unsafe {
            match tile.vectors {
                4 => pixels!(4; 1 2 3 4 5 6),
                3 => pixels!(3; 1 2 3 4 5 6 7 8),
                2 => pixels!(2; 1 2 3 4 5 6 7 8 9 10 11 12),
                _ => pixels!(1; 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24),
            }
        }
    }

    /// The sums where the tile's earlier passes left them in its output (or zero).
    ///
    /// # Safety
    /// As `blocked_conv`, for this tile (of `P` pixels and `V` vectors).
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(super) unsafe fn start<const P: usize, const V: usize>(
        tile: &Tile<'_>,
    ) -> [[__m512; V]; P] {
        if !tile.resume {
            return [[_mm512_setzero_ps(); V]; P];
        }
        std::array::from_fn(|pixel| {
            std::array::from_fn(|vector| {
                // SAFETY: inside the tile's output (the caller's contract).
                unsafe {
                    _mm512_loadu_ps(tile.out.at(vector * tile.block_out_stride + pixel * BLOCK))
                }
            })
        })
    }

    /// `P` pixels x `V` blocks of 16 filters: the sums from where the tile's earlier passes
    /// left them (or zero), then `finish` and the stores, in one function so that the
    /// accumulators stay in registers from the first load to the last store.
    #[target_feature(enable = "avx512f")]
    #[inline(never)]
    unsafe fn sums<const P: usize, const V: usize>(tile: &Tile<'_>, finish: Option<&Finish<'_>>) {
        // SAFETY: the caller's contract.
        unsafe {
            let start = start::<P, V>(tile);
            let sums = if tile.contiguous {
                accumulate::<P, V, true>(tile, start)
            } else {
                accumulate::<P, V, false>(tile, start)
            };
            store::<P, V>(tile, finish, &sums);
        }
    }

    /// The tile's sums from `start`: per channel of every tap, `V` weight vectors and `P`
    /// broadcast inputs (`CONTIGUOUS`: pixel `p`'s inputs `16 p` values after the first
    /// pixel's).
    ///
    /// # Safety
    /// As `sums`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn accumulate<const P: usize, const V: usize, const CONTIGUOUS: bool>(
        tile: &Tile<'_>,
        start: [[__m512; V]; P],
    ) -> [[__m512; V]; P] {
        let mut sums = start;
        let mut next_pass = super::NextPass::of(tile);
        // SAFETY: the function's contract: every input, weight and output addressed lies in
        // its checked tensor or the padded buffer.
        unsafe {
            for block in 0..tile.blocks {
                let channels = (tile.channels - block * BLOCK).min(BLOCK);
                let x = tile.x.add(block * tile.block_stride);
                let w = tile.w.add(block * BLOCK * tile.channel_stride);
                for (t, &tap) in tile.taps.iter().enumerate() {
                    next_pass.tap();
                    let inputs: [*const f32; P] = if CONTIGUOUS {
                        let first = x.add(tile.inputs[0] + tap);
                        std::array::from_fn(|pixel| first.add(pixel * BLOCK))
                    } else {
                        std::array::from_fn(|pixel| x.add(tile.inputs[pixel] + tap))
                    };
                    let weights = w.add(t * PANEL);
                    let mut step = |channel: usize| {
                        let row = weights.add(channel * tile.channel_stride);
                        let b: [__m512; V] =
                            std::array::from_fn(|vector| _mm512_loadu_ps(row.add(vector * BLOCK)));
                        for (sums, input) in sums.iter_mut().zip(&inputs) {
                            let a = _mm512_set1_ps(*input.add(channel));
                            for (sum, b) in sums.iter_mut().zip(&b) {
                                *sum = _mm512_fmadd_ps(a, *b, *sum);
                            }
                        }
                    };
                    if channels == BLOCK {
                        for channel in 0..BLOCK {
                            step(channel);
                        }
                    } else {
                        for channel in 0..channels {
                            step(channel);
                        }
                    }
                }
            }
        }
        sums
    }

    /// `finish` on the sums (when given), stored in `out`.
    ///
    /// # Safety
    /// As `sums`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(super) unsafe fn store<const P: usize, const V: usize>(
        tile: &Tile<'_>,
        finish: Option<&Finish<'_>>,
        sums: &[[__m512; V]; P],
    ) {
        for vector in 0..V {
            // SAFETY: the function's contract.
            let finisher = finish.map(|finish| unsafe { Finisher::new(finish, vector) });
            for (pixel, sums) in sums.iter().enumerate() {
                let offset = vector * tile.block_out_stride + pixel * BLOCK;
                // SAFETY: the function's contract: the offset lies in the tile's output.
                unsafe {
                    let value = match &finisher {
                        Some(finisher) => finisher.apply(sums[vector], offset),
                        None => sums[vector],
                    };
                    _mm512_storeu_ps(tile.out.at(offset), value);
                }
            }
        }
    }

    /// A tile's [`Finish`] for one block of 16 filters, in registers.
    pub(super) struct Finisher<'a> {
        finish: &'a Finish<'a>,
        scale: Option<__m512>,
        shift: Option<__m512>,
    }

    impl<'a> Finisher<'a> {
        /// # Safety
        /// The CPU has AVX-512F. (`finish`'s `scale` and `shift` must hold filter block
        /// `vector`'s 16 values: checked, with a panic otherwise.)
        #[target_feature(enable = "avx512f")]
        #[inline]
        pub(super) unsafe fn new(finish: &'a Finish<'a>, vector: usize) -> Finisher<'a> {
            let per_filter = |values: Option<&[f32]>| {
                values.map(|values| {
                    let values = &values[vector * BLOCK..][..BLOCK];
                    // SAFETY: 16 values, just sliced; the CPU has AVX-512F (the contract).
                    unsafe { _mm512_loadu_ps(values.as_ptr()) }
                })
            };
            Finisher {
                finish,
                scale: per_filter(finish.scale),
                shift: per_filter(finish.shift),
            }
        }

        /// `value * scale + shift + residual`, clamped, for the 16 values at `offset` from
        /// the tile's first output.
        ///
        /// # Safety
        /// The CPU has AVX-512F; the residual (if any) holds 16 values at `offset`.
        #[target_feature(enable = "avx512f")]
        #[inline]
        pub(super) unsafe fn apply(&self, mut value: __m512, offset: usize) -> __m512 {
            if let Some(scale) = self.scale {
                value = _mm512_mul_ps(value, scale);
            }
            if let Some(shift) = self.shift {
                value = _mm512_add_ps(value, shift);
            }
            if let Some(residual) = self.finish.residual {
                // SAFETY: the function's contract.
                value = _mm512_add_ps(value, unsafe { _mm512_loadu_ps(residual.at(offset)) });
            }
            if let Some((low, high)) = self.finish.clamp {
                value = _mm512_min_ps(
                    _mm512_max_ps(value, _mm512_set1_ps(low)),
                    _mm512_set1_ps(high),
                );
            }
            value
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amx_tiles_stay_within_output_rows() {
        // 40 pixels of a 14-wide plane from pixel 10: 4 of row 0, 14 of row 1 (one tile),
        // 14 of row 2, 8 of row 3.
        let (count, spans) = amx_row_spans(&(10..50), 14).unwrap();
        assert_eq!(&spans[..count], [0..4, 4..18, 18..32, 32..40]);
        // A 56-wide row's 40 pixels: tiles of 13, 13, 14.
        let (count, spans) = amx_row_spans(&(0..40), 56).unwrap();
        assert_eq!(&spans[..count], [0..13, 13..26, 26..40]);
        // 72 pixels of a 3-wide plane: 24 rows, more tiles than a segment holds.
        assert!(amx_row_spans(&(0..72), 3).is_none());
    }

    #[test]
    fn small_planes_are_split_in_segments_enough_for_the_cores() {
        // 7x7, 160 filters (3 panels): 3 segments of 17, 16, 16 pixels, not 1 of 49.
        assert_eq!(segment_pixels(49, 3), 17);
        // 14x14, 96 filters (2 panels): 4 of 49.
        assert_eq!(segment_pixels(196, 2), 49);
        // Enough units already: segments of SEGMENT.
        assert_eq!(segment_pixels(56 * 56, 1), SEGMENT);
        assert_eq!(segment_pixels(7 * 7, 8), 49);
        // Never below MIN_SEGMENT: a 4x4 plane is one segment, 30 pixels two of 15.
        assert_eq!(segment_pixels(16, 1), 16);
        assert_eq!(segment_pixels(30, 1), 15);
        // No pixels: no segment (a segment size is never 0, it divides).
        assert_eq!(0usize.div_ceil(segment_pixels(0, 1)), 0);
    }
}
