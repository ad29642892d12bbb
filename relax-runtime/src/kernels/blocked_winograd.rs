//! 3x3 convolutions with stride 1 on channel-blocked tensors (`[N, C/16, H, W, 16]`, see
//! [`blocked`](super::blocked)) by Winograd's F(2x2, 3x3): each 2x2 block of output
//! pixels (a tile) takes 16 multiply-adds per filter and channel instead of 36.
//!
//! With `d` a tile's 4x4 input patch and `g` a 3x3 kernel, the tile's output is
//! `Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A` (the transforms of [`winograd`](super::winograd), which
//! also makes the weights' part, `U = G g Gᵀ`, `[16, C, F]`, when the weights load). Per
//! image, in three launches over the thread pool:
//!
//! 1. the input transform `V = Bᵀ d B` of every tile, 16 channels at a time (one vector
//!    per pixel of the blocked input; padding read as zeros), into `V[ξ]` laid out as a
//!    blocked image one pixel high and a pixel per tile wide: `[C/16, 1, tiles, 16]`;
//! 2. for each of the 16 values ξ, the product `M[ξ] = V[ξ] U[ξ]`, which is a 1x1
//!    convolution of that image: the blocked kernel's tiles (64 filters x 6 tiles, the
//!    filters of `U[ξ]` read as panels of 64 with a channel stride of F);
//! 3. the output transform `Aᵀ m A` of every tile and block of 16 filters, then the
//!    scale, shift, residual and activation, into the blocked output.
//!
//! The products are the blocked kernel's own: 2.25 times fewer multiply-adds, for the
//! price of the two transforms and of `V` and `M` (4 values per pixel of the input and of
//! the output) going through memory.

use super::blocked::{ImageTiles, Source, WeightStrides, BLOCK, SEGMENT};
use super::conv::{Conv2d, Operands};
use super::epilogue::Epilogue;
use super::panels::PANEL;
use super::parallel::{for_each_unit, Executor, Shared, INLINE_WORK};
use super::scratch::{prefix, reuse};

/// Values of a transformed tile: F(2x2, 3x3)'s 4x4.
const VALUES: usize = 16;

thread_local! {
    /// The transformed input (`V`) and products (`M`) of the convolutions called on this
    /// thread.
    static TRANSFORMED: std::cell::RefCell<(Vec<f32>, Vec<f32>)> = std::cell::RefCell::default();
}

/// Whether [`blocked_winograd`] computes `shape`: a 3x3 kernel, stride and dilation 1,
/// one group, whole blocks of 16 channels and filters.
pub(crate) fn computes(shape: &Conv2d) -> bool {
    shape.kernel == (3, 3)
        && shape.stride == (1, 1)
        && shape.dilation == (1, 1)
        && shape.groups == 1
        && shape.channels.is_multiple_of(BLOCK)
        && shape.filters.is_multiple_of(BLOCK)
}

/// `U = G g Gᵀ` of every 3x3 kernel of `weights` (`[filters, channels, 3, 3]`), in the
/// layout [`blocked_winograd`] reads: `[16, ceil(filters / 64), channels, 64]`, for each ξ
/// panels of 64 filters (zeros past the last filter), each channel's 64 contiguous. (With
/// the filters of a channel a whole row of `[16, channels, filters]` apart instead, the
/// 512 cache lines of a pass of 128 channels, 1 KiB apart at 256 filters, fell into 16 of
/// the level-1 cache's 64 sets: the products ran at 45 GFLOP/s.)
pub(crate) fn transform_weights(weights: &[f32], filters: usize, channels: usize) -> Vec<f32> {
    let transformed =
        super::winograd::transform_weights(weights, filters, channels, super::winograd::Tile::Two);
    let panels = filters.div_ceil(PANEL);
    let mut out = vec![0f32; VALUES * panels * channels * PANEL];
    for xi in 0..VALUES {
        for channel in 0..channels {
            let row = &transformed[(xi * channels + channel) * filters..][..filters];
            for (filter, value) in row.iter().enumerate() {
                let (panel, lane) = (filter / PANEL, filter % PANEL);
                out[((xi * panels + panel) * channels + channel) * PANEL + lane] = *value;
            }
        }
    }
    out
}

/// The sizes of one image's tiles and transformed tensors.
struct Plan {
    output: (usize, usize),
    /// Tile rows and columns.
    tiles: (usize, usize),
}

impl Plan {
    fn tile_count(&self) -> usize {
        self.tiles.0 * self.tiles.1
    }
}

/// `out = epilogue(conv2d(x, w) * scale + shift + residual)` with `x`, `out` (and
/// `residual`) blocked, `w` the Winograd transform of the 3x3 kernel as
/// [`transform_weights`] lays it out; with
/// AVX-512 tiles when `avx512` (pass `avx512_available()`), else portable ones.
///
/// # Safety
/// `computes(shape)`; `x` holds `shape.batch` images `[C / 16, H, W, 16]`, `w` `16 *
/// ceil(F / 64) * C * 64` values, `out` and `residual` `[N, F / 16, OH, OW, 16]`, `per_filter` a value per
/// filter; all valid for the call, and `out` overlaps none of the others. `avx512` only
/// where the CPU has AVX-512F.
pub(crate) unsafe fn blocked_winograd(
    shape: &Conv2d,
    avx512: bool,
    operands: Operands<'_>,
    executor: Executor,
) -> Result<(), String> {
    if !computes(shape) {
        return Err(format!(
            "Winograd F(2x2, 3x3) on blocked tensors does not compute {shape:?}"
        ));
    }
    let Operands {
        x,
        w,
        per_filter,
        residual,
        epilogue,
        out,
    } = operands;
    let output = shape
        .output()
        .ok_or("the kernel does not fit the padded input")?;
    let plan = Plan {
        output,
        tiles: (output.0.div_ceil(2), output.1.div_ceil(2)),
    };
    let tiles = plan.tile_count();
    let too_large = || "the transformed tensors are too large".to_string();
    let transformed_len = |channels: usize| {
        [tiles, VALUES]
            .into_iter()
            .try_fold(channels, usize::checked_mul)
            .ok_or_else(too_large)
    };
    let (v_len, m_len) = (
        transformed_len(shape.channels)?,
        transformed_len(shape.filters)?,
    );
    let input_image = shape.channels * shape.height * shape.width;
    let output_image = shape.filters * output.0 * output.1;
    let (channel_blocks, filter_blocks) = (shape.channels / BLOCK, shape.filters / BLOCK);
    // The products, as 1x1 convolutions of an image one pixel high and `tiles` wide.
    let product = Conv2d {
        batch: 1,
        channels: shape.channels,
        height: 1,
        width: tiles,
        filters: shape.filters,
        kernel: (1, 1),
        stride: (1, 1),
        padding: (0, 0, 0, 0),
        dilation: (1, 1),
        groups: 1,
    };
    let panels = shape.filters.div_ceil(PANEL);
    let segments = tiles.div_ceil(SEGMENT);
    let product_units = VALUES * panels * segments;
    let inline = shape.filters * tiles * shape.channels * VALUES < INLINE_WORK;
    let x = Shared(x.cast_mut());
    let residual = residual.map(|residual| Shared(residual.cast_mut()));
    reuse(&TRANSFORMED, |(v_buffer, m_buffer)| {
        let v = Shared(prefix(v_buffer, v_len).as_mut_ptr());
        let m = Shared(prefix(m_buffer, m_len).as_mut_ptr());
        // The products' tiles, the same for every image (V and M are reused).
        let products: Vec<ImageTiles<'_>> = (0..VALUES)
            .map(|xi| ImageTiles {
                shape: &product,
                source: Source {
                    data: Shared(v.at(xi * v_len / VALUES)),
                    height: 1,
                    width: tiles,
                },
                taps: &[0],
                panels: Shared(Shared(w.cast_mut()).at(xi * panels * shape.channels * PANEL)),
                strides: WeightStrides {
                    panel: shape.channels * PANEL,
                    channel: PANEL,
                },
                out: Shared(m.at(xi * m_len / VALUES)),
                residual: None,
                per_filter: None,
                epilogue: Epilogue::None,
                output: (1, tiles),
                avx512,
            })
            .collect();
        for image in 0..shape.batch {
            let image_x = Shared(x.at(image * input_image));
            // 1. V, per block of channels and row of tiles.
            let input_units = channel_blocks * plan.tiles.0;
            for_each_unit(executor, inline, input_units, &|unit| {
                let (block, tile_row) = (unit / plan.tiles.0, unit % plan.tiles.0);
                // SAFETY: the image's input, read only; this block's values of this tile
                // row in V, this unit's alone.
                unsafe { transform_input(shape, &plan, image_x, v, block, tile_row) };
            })?;
            // 2. M[ξ] = V[ξ] U[ξ].
            for_each_unit(executor, inline, product_units, &|unit| {
                let (xi, unit) = (unit / (panels * segments), unit % (panels * segments));
                let (panel, segment) = (unit / segments, unit % segments);
                let pixels = segment * SEGMENT..((segment + 1) * SEGMENT).min(tiles);
                // SAFETY: V[ξ] and U[ξ] read only; this segment of this panel's filters in
                // M[ξ], this unit's alone.
                unsafe { products[xi].compute(panel, pixels) };
            })?;
            // 3. The output, per block of filters and row of tiles.
            let image_out = Shared(out.at(image * output_image));
            let image_residual = residual.map(|residual| Shared(residual.at(image * output_image)));
            let output_units = filter_blocks * plan.tiles.0;
            for_each_unit(executor, inline, output_units, &|unit| {
                let (block, tile_row) = (unit / plan.tiles.0, unit % plan.tiles.0);
                let finish = Finish {
                    scale: per_filter
                        .and_then(|per_filter| per_filter.scale)
                        .map(|scale| &scale[block * BLOCK..(block + 1) * BLOCK]),
                    shift: per_filter
                        .map(|per_filter| &per_filter.shift[block * BLOCK..(block + 1) * BLOCK]),
                    residual: image_residual,
                    epilogue,
                };
                // SAFETY: M read only; this block's output pixels of this tile row, this
                // unit's alone.
                unsafe {
                    transform_output(
                        &plan,
                        m,
                        m_len / VALUES,
                        block,
                        tile_row,
                        image_out,
                        &finish,
                    )
                };
            })?;
        }
        Ok(())
    })
}

/// What the output transform applies to each output vector.
struct Finish<'a> {
    scale: Option<&'a [f32]>,
    shift: Option<&'a [f32]>,
    /// Laid out as the image's output.
    residual: Option<Shared>,
    epilogue: Epilogue,
}

/// `V = Bᵀ d B` of the tiles of tile row `tile_row`, for channel block `block`: into
/// `v[ξ][block][tile][16]`.
///
/// # Safety
/// `x` holds the image's blocked input; `v` the image's V (`16 * C * tiles` values), of
/// which this block's tiles of this row are written by no other thread.
unsafe fn transform_input(
    shape: &Conv2d,
    plan: &Plan,
    x: Shared,
    v: Shared,
    block: usize,
    tile_row: usize,
) {
    let (top, left, _, _) = shape.padding;
    let tiles = plan.tile_count();
    let plane = shape.height * shape.width;
    // SAFETY: block `block` of the image, inside `x`.
    let input = unsafe {
        std::slice::from_raw_parts(x.at(block * plane * BLOCK).cast_const(), plane * BLOCK)
    };
    let xi_stride = shape.channels * tiles;
    for tile_column in 0..plan.tiles.1 {
        let mut patch = [[0f32; BLOCK]; VALUES];
        for (index, values) in patch.iter_mut().enumerate() {
            let (row, column) = (index / 4, index % 4);
            let y = (2 * tile_row + row).checked_sub(top);
            let x = (2 * tile_column + column).checked_sub(left);
            if let (Some(y), Some(x)) = (y, x) {
                if y < shape.height && x < shape.width {
                    let at = (y * shape.width + x) * BLOCK;
                    values.copy_from_slice(&input[at..at + BLOCK]);
                }
            }
        }
        let mut transformed = [[0f32; BLOCK]; VALUES];
        input_transform(&patch, &mut transformed);
        let tile = tile_row * plan.tiles.1 + tile_column;
        for (xi, values) in transformed.iter().enumerate() {
            // SAFETY: V[ξ][block][tile], this unit's (the function's contract).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    values.as_ptr(),
                    v.at(xi * xi_stride + (block * tiles + tile) * BLOCK),
                    BLOCK,
                )
            };
        }
    }
}

/// `Aᵀ m A` of the tiles of tile row `tile_row`, for filter block `block`, finished and
/// stored in the image's output (the pixels inside it: a tile past an odd edge has one
/// row or column less).
///
/// # Safety
/// `m` holds the image's products (`m_stride` values per ξ); `out` (and `finish`'s
/// residual) the image's output, of which this block's pixels of this tile row are
/// written by no other thread.
unsafe fn transform_output(
    plan: &Plan,
    m: Shared,
    m_stride: usize,
    block: usize,
    tile_row: usize,
    out: Shared,
    finish: &Finish<'_>,
) {
    let tiles = plan.tile_count();
    let (height, width) = plan.output;
    for tile_column in 0..plan.tiles.1 {
        let tile = tile_row * plan.tiles.1 + tile_column;
        let mut products = [[0f32; BLOCK]; VALUES];
        for (xi, values) in products.iter_mut().enumerate() {
            // SAFETY: M[ξ][block][tile], inside the products.
            let source = unsafe {
                std::slice::from_raw_parts(
                    m.at(xi * m_stride + (block * tiles + tile) * BLOCK)
                        .cast_const(),
                    BLOCK,
                )
            };
            values.copy_from_slice(source);
        }
        let mut pixels = [[0f32; BLOCK]; 4];
        output_transform(&products, &mut pixels);
        for (index, pixel) in pixels.iter().enumerate() {
            let (y, x) = (2 * tile_row + index / 2, 2 * tile_column + index % 2);
            if y >= height || x >= width {
                continue;
            }
            let at = ((block * height + y) * width + x) * BLOCK;
            let mut values = *pixel;
            finish_values(&mut values, finish, at);
            // SAFETY: this pixel of this block, this unit's (the function's contract).
            unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), out.at(at), BLOCK) };
        }
    }
}

/// `values * scale + shift + residual[at..]`, then the activation.
fn finish_values(values: &mut [f32; BLOCK], finish: &Finish<'_>, at: usize) {
    if let Some(scale) = finish.scale {
        values
            .iter_mut()
            .zip(scale)
            .for_each(|(value, scale)| *value *= scale);
    }
    if let Some(shift) = finish.shift {
        values
            .iter_mut()
            .zip(shift)
            .for_each(|(value, shift)| *value += shift);
    }
    if let Some(residual) = finish.residual {
        // SAFETY: the residual has the output's layout, and `at` is inside it.
        let residual = unsafe { std::slice::from_raw_parts(residual.at(at).cast_const(), BLOCK) };
        values
            .iter_mut()
            .zip(residual)
            .for_each(|(value, residual)| *value += residual);
    }
    finish.epilogue.apply(values);
}

super::simd::multiversion! {
    // The index arithmetic spells out the transform's formulas.
    #[allow(clippy::needless_range_loop)]
    /// `out = Bᵀ d B` of one patch `d` (row-major, a vector of 16 channels per pixel),
    /// row-major.
    fn input_transform(d: &[[f32; BLOCK]; VALUES], out: &mut [[f32; BLOCK]; VALUES]) {
        // Bᵀ d: per column k, x0 - x2, x1 + x2, x2 - x1, x1 - x3 of its rows.
        let mut t = [[0f32; BLOCK]; VALUES];
        for k in 0..4 {
            for lane in 0..BLOCK {
                let (d0, d1, d2, d3) = (d[k][lane], d[4 + k][lane], d[8 + k][lane], d[12 + k][lane]);
                t[k][lane] = d0 - d2;
                t[4 + k][lane] = d1 + d2;
                t[8 + k][lane] = d2 - d1;
                t[12 + k][lane] = d1 - d3;
            }
        }
        // (Bᵀ d) B: the same along each row.
        for row in 0..4 {
            let r = row * 4;
            for lane in 0..BLOCK {
                let (t0, t1, t2, t3) = (t[r][lane], t[r + 1][lane], t[r + 2][lane], t[r + 3][lane]);
                out[r][lane] = t0 - t2;
                out[r + 1][lane] = t1 + t2;
                out[r + 2][lane] = t2 - t1;
                out[r + 3][lane] = t1 - t3;
            }
        }
    }
}

super::simd::multiversion! {
    // The index arithmetic spells out the transform's formulas.
    #[allow(clippy::needless_range_loop)]
    /// `out = Aᵀ m A` of one tile's products `m` (row-major): its 2x2 output pixels,
    /// row-major.
    fn output_transform(m: &[[f32; BLOCK]; VALUES], out: &mut [[f32; BLOCK]; 4]) {
        // Aᵀ m: per column k, x0 + x1 + x2 and x1 - x2 - x3 of its rows.
        let mut t = [[0f32; BLOCK]; 8];
        for k in 0..4 {
            for lane in 0..BLOCK {
                let (m0, m1, m2, m3) = (m[k][lane], m[4 + k][lane], m[8 + k][lane], m[12 + k][lane]);
                t[k][lane] = m0 + m1 + m2;
                t[4 + k][lane] = m1 - m2 - m3;
            }
        }
        // (Aᵀ m) A: the same along each row.
        for row in 0..2 {
            let r = row * 4;
            for lane in 0..BLOCK {
                let (t0, t1, t2, t3) = (t[r][lane], t[r + 1][lane], t[r + 2][lane], t[r + 3][lane]);
                out[row * 2][lane] = t0 + t1 + t2;
                out[row * 2 + 1][lane] = t1 - t2 - t3;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{input_transform, output_transform, BLOCK, VALUES};

    #[test]
    fn the_transforms_compute_a_3x3_correlation_of_a_patch() {
        // With U = G g Gᵀ from winograd's weight transform, Aᵀ (U ⊙ Bᵀ d B) A is the
        // 2x2 correlation of the 4x4 patch d with g, lane by lane.
        let g: Vec<f32> = (0..9).map(|index| index as f32 * 0.25 - 1.0).collect();
        let u = crate::kernels::winograd::transform_weights(
            &g,
            1,
            1,
            crate::kernels::winograd::Tile::Two,
        );
        let d: [[f32; BLOCK]; VALUES] = std::array::from_fn(|index| {
            std::array::from_fn(|lane| (index * 7 + lane * 3) as f32 % 5.0 - 2.0)
        });
        let mut v = [[0f32; BLOCK]; VALUES];
        input_transform(&d, &mut v);
        let products: [[f32; BLOCK]; VALUES] =
            std::array::from_fn(|xi| std::array::from_fn(|lane| u[xi] * v[xi][lane]));
        let mut y = [[0f32; BLOCK]; 4];
        output_transform(&products, &mut y);
        for (index, pixel) in y.iter().enumerate() {
            let (row, column) = (index / 2, index % 2);
            for lane in 0..BLOCK {
                let expected: f32 = (0..9)
                    .map(|tap| g[tap] * d[(row + tap / 3) * 4 + column + tap % 3][lane])
                    .sum();
                assert!(
                    (pixel[lane] - expected).abs() < 1e-4,
                    "pixel {index} lane {lane}: {} against {expected}",
                    pixel[lane]
                );
            }
        }
    }
}
