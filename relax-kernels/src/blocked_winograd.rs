//! 3x3 convolutions with stride 1 on channel-blocked tensors (`[N, C/16, H, W, 16]`, see
//! [`blocked`](super::blocked)) by Winograd's F(2x2, 3x3) or F(4x4, 3x3): each 2x2 block
//! of output pixels (a tile) takes 16 multiply-adds per filter and channel instead of 36,
//! each 4x4 block 36 instead of 144.
//!
//! With `d` a tile's input patch (4x4, or 6x6) and `g` a 3x3 kernel, the tile's output is
//! `Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A` (the transforms of [`winograd`](super::winograd), which
//! also makes the weights' part, `U = G g Gᵀ`, `[16 or 36, C, F]`, when the weights
//! load). Below, ξ runs over a transformed tile's 16 (or 36) values. Per image, in three
//! launches over the thread pool:
//!
//! 1. the input transform `V = Bᵀ d B` of every tile, 16 channels at a time (one vector
//!    per pixel of the blocked input; padding read as zeros), into `V[ξ]` laid out as a
//!    blocked image one pixel high and a pixel per tile wide: `[C/16, 1, tiles, 16]`;
//! 2. for each value ξ, the product `M[ξ] = V[ξ] U[ξ]`, which is a 1x1
//!    convolution of that image: the blocked kernel's tiles (64 filters x 6 tiles, the
//!    filters of `U[ξ]` read as panels of 64 with a channel stride of F);
//! 3. the output transform `Aᵀ m A` of every tile and block of 16 filters, then the
//!    scale, shift, residual and activation, into the blocked output.
//!
//! The products are the blocked kernel's own: 2.25 (or 4) times fewer multiply-adds, for
//! the price of the two transforms and of `V` and `M` (4, or 2.25, values per pixel of
//! the input and of the output) going through memory.

use super::blocked::{Arithmetic, ImageTiles, Source, WeightStrides, BLOCK, SEGMENT};
use super::conv_operands::{Conv2d, Operands};
use super::epilogue::{add, Epilogue};
use super::panels::PANEL;
use super::parallel::{for_each_unit, Launch, Shared, UnitOrder, INLINE_WORK};
use super::scratch::{prefix, reuse};
use super::simd::{multiversion, Isa};
use super::winograd::{input_transform4, output_transform4, Tile};

/// The most values of a transformed tile: F(4x4, 3x3)'s 6x6.
const MAX_VALUES: usize = 36;

/// The most output pixels per side of a tile.
const MAX_SIDE: usize = 4;

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

/// `U = G g Gᵀ` of every 3x3 kernel of `weights` (`[filters, channels, 3, 3]`) for
/// `tile`, in the layout the blocked Winograd convolution reads: `[tile.values(), ceil(filters / 64),
/// channels, 64]`, for each ξ
/// panels of 64 filters (zeros past the last filter), each channel's 64 contiguous. (With
/// the filters of a channel a whole row of `[16, channels, filters]` apart instead, the
/// 512 cache lines of a pass of 128 channels, 1 KiB apart at 256 filters, fell into 16 of
/// the level-1 cache's 64 sets: the products ran at 45 GFLOP/s.)
pub fn transform_weights(weights: &[f32], filters: usize, channels: usize, tile: Tile) -> Vec<f32> {
    let transformed = super::winograd::transform_weights(weights, filters, channels, tile);
    let panels = filters.div_ceil(PANEL);
    let mut out = vec![0f32; tile.values() * panels * channels * PANEL];
    for xi in 0..tile.values() {
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

multiversion! {
    /// [`transform_weights`] of a 3x3 kernel packed in filter panels, `[ceil(F / 64), C,
    /// 3, 3, 64]` (zeros past the last filter), into `out`, `[tile.values(), ceil(F / 64),
    /// C, 64]` (every value written): the 64 filters of a panel's channel at a time, in
    /// float32 (a kernel whose panels relax-runtime packed when the model loaded, over
    /// planes whose size was not known when it was compiled).
    pub(crate) fn transform_panels_into(panels: &[f32], channels: usize, tile: Tile, out: &mut [f32]) {
        let g = tile.kernel_transform();
        let side = g.len();
        let kernel_values = 9 * PANEL;
        let panel_count = panels.len() / (channels * kernel_values).max(1);
        for (index, kernel) in panels.chunks_exact(kernel_values).enumerate() {
            let (panel, channel) = (index / channels, index % channels);
            for (i, g_i) in g.iter().enumerate() {
                // Row i of G g, for each of the 64 filters.
                let mut left = [[0f32; PANEL]; 3];
                for (column, sums) in left.iter_mut().enumerate() {
                    for (t, coefficient) in g_i.iter().enumerate() {
                        let tap = &kernel[(t * 3 + column) * PANEL..][..PANEL];
                        let coefficient = *coefficient as f32;
                        sums.iter_mut().zip(tap).for_each(|(sum, weight)| *sum += coefficient * weight);
                    }
                }
                for (j, g_j) in g.iter().enumerate() {
                    let xi = i * side + j;
                    let run = &mut out[((xi * panel_count + panel) * channels + channel) * PANEL..][..PANEL];
                    run.fill(0.0);
                    for (sums, coefficient) in left.iter().zip(g_j) {
                        let coefficient = *coefficient as f32;
                        run.iter_mut().zip(sums).for_each(|(value, sum)| *value += coefficient * sum);
                    }
                }
            }
        }
    }
}

/// The sizes of one image's tiles and transformed tensors.
struct Plan {
    tile: Tile,
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
/// `residual`) blocked, `w` the Winograd transform of the 3x3 kernel for `tile` as
/// [`transform_weights`] lays it out; with
/// the tiles of `isa`.
///
/// # Safety
/// `computes(shape)`; `x` holds `shape.batch` images `[C / 16, H, W, 16]`, `w`
/// `tile.values() * ceil(F / 64) * C * 64` values, `out` and `residual` `[N, F / 16, OH,
/// OW, 16]`, `per_filter` a value per filter; all valid for the call, and `out` overlaps
/// none of the others. `isa` one this CPU runs ([`Isa::runs_here`]).
pub(crate) unsafe fn blocked_winograd(
    shape: &Conv2d,
    tile: Tile,
    isa: Isa,
    operands: Operands<'_>,
    launch: Launch,
) -> Result<(), String> {
    if !computes(shape) {
        return Err(format!(
            "Winograd on blocked tensors does not compute {shape:?}"
        ));
    }
    let values = tile.values();
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
    let side = tile.output();
    let plan = Plan {
        tile,
        output,
        tiles: (output.0.div_ceil(side), output.1.div_ceil(side)),
    };
    let tiles = plan.tile_count();
    let too_large = || "the transformed tensors are too large".to_string();
    let transformed_len = |channels: usize| {
        [tiles, values]
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
    let product_units = values * panels * segments;
    // A product's weights (U[ξ]) against its activations (V[ξ] and M[ξ]).
    let order = UnitOrder::of(
        shape.channels * shape.filters,
        tiles * (shape.channels + shape.filters),
    );
    let by_rows = UnitOrder::without_weights();
    let inline = shape.filters * tiles * shape.channels * values < INLINE_WORK;
    let x = Shared(x.cast_mut());
    let residual = residual.map(|residual| Shared(residual.cast_mut()));
    reuse(&TRANSFORMED, |(v_buffer, m_buffer)| {
        let v = Shared(prefix(v_buffer, v_len).as_mut_ptr());
        let m = Shared(prefix(m_buffer, m_len).as_mut_ptr());
        // The products' tiles, the same for every image (V and M are reused).
        let products: Vec<ImageTiles<'_>> = (0..values)
            .map(|xi| ImageTiles {
                shape: &product,
                source: Source {
                    data: Shared(v.at(xi * v_len / values)),
                    height: 1,
                    width: tiles,
                },
                taps: &[0],
                panels: Shared(Shared(w.cast_mut()).at(xi * panels * shape.channels * PANEL)),
                strides: WeightStrides {
                    panel: shape.channels * PANEL,
                    channel: PANEL,
                },
                out: Shared(m.at(xi * m_len / values)),
                residual: None,
                per_filter: None,
                epilogue: Epilogue::None,
                output: (1, tiles),
                arithmetic: Arithmetic::F32(isa),
            })
            .collect();
        for image in 0..shape.batch {
            let image_x = Shared(x.at(image * input_image));
            // 1. V, per block of channels and row of tiles (numbered by rows: see
            // `UnitOrder::without_weights`).
            let input_units = channel_blocks * plan.tiles.0;
            for_each_unit(launch, inline, input_units, &|unit| {
                let (block, tile_row) = by_rows.split(unit, channel_blocks, plan.tiles.0);
                // SAFETY: the image's input, read only; this block's values of this tile
                // row in V, this unit's alone.
                unsafe { transform_input(shape, &plan, image_x, v, block, tile_row) };
            })?;
            // 2. M[ξ] = V[ξ] U[ξ].
            // Units numbered as the blocked kernel's, ξ counted with the panels: by
            // pixels, a segment's tiles of every ξ and panel.
            for_each_unit(launch, inline, product_units, &|unit| {
                let (panel, segment) = order.split(unit, values * panels, segments);
                let (xi, panel) = (panel / panels, panel % panels);
                let pixels = segment * SEGMENT..((segment + 1) * SEGMENT).min(tiles);
                // SAFETY: V[ξ] and U[ξ] read only; this segment of this panel's filters in
                // M[ξ], this unit's alone.
                unsafe { products[xi].compute(panel, pixels) };
            })?;
            // 3. The output, per block of filters and row of tiles (numbered as V's).
            let image_out = Shared(out.at(image * output_image));
            let image_residual = residual.map(|residual| Shared(residual.at(image * output_image)));
            let output_units = filter_blocks * plan.tiles.0;
            for_each_unit(launch, inline, output_units, &|unit| {
                let (block, tile_row) = by_rows.split(unit, filter_blocks, plan.tiles.0);
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
                        m_len / values,
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
/// `x` holds the image's blocked input; `v` the image's V (`values * C * tiles` values), of
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
    let rows = InputRows {
        input,
        height: shape.height,
        width: shape.width,
        top: (plan.tile.output() * tile_row) as isize - top as isize,
        left: -(left as isize),
    };
    let run = plan.tiles.1 * BLOCK;
    let xi_stride = shape.channels * tiles;
    let first = (block * tiles + tile_row * plan.tiles.1) * BLOCK;
    let mut runs: [&mut [f32]; MAX_VALUES] = std::array::from_fn(|xi| {
        if xi < plan.tile.values() {
            // SAFETY: V[ξ][block][the row's tiles], this unit's alone (the function's
            // contract); the runs of different ξ are disjoint.
            unsafe { std::slice::from_raw_parts_mut(v.at(xi * xi_stride + first), run) }
        } else {
            Default::default()
        }
    });
    transform_row(plan.tile, &rows, plan.tiles.1, &mut runs);
}

/// One block of an image's input, where a tile row's patches start: row `top` and
/// column `left` (negative in the padding).
struct InputRows<'a> {
    /// `[height, width, 16]`.
    input: &'a [f32],
    height: usize,
    width: usize,
    top: isize,
    left: isize,
}

super::simd::multiversion! {
    /// The transformed patches of the `columns` tiles of one tile row of `rows`, into
    /// `runs[ξ][column * 16..][..16]` (padding read as zeros).
    fn transform_row(tile: Tile, rows: &InputRows<'_>, columns: usize, runs: &mut [&mut [f32]; MAX_VALUES]) {
        match tile {
            Tile::Two => transform_row_of::<4>(2, input_transform2, rows, columns, runs),
            Tile::Four => transform_row_of::<6>(4, input_transform4, rows, columns, runs),
        }
    }
}

/// [`transform_row`] for patches of side `N`, output tiles of side `side`, with `Bᵀ x`
/// (`transform`) of the patch's rows and columns.
#[inline(always)]
fn transform_row_of<const N: usize>(
    side: usize,
    transform: impl Fn(&[[f32; BLOCK]; N]) -> [[f32; BLOCK]; N],
    rows: &InputRows<'_>,
    columns: usize,
    runs: &mut [&mut [f32]; MAX_VALUES],
) {
    let line = rows.width * BLOCK;
    // The patches' rows, where they are inside the input. (Plain loops: `array::from_fn`
    // did not inline here, and ran 2.5 times slower.)
    let mut lines: [Option<&[f32]>; N] = [None; N];
    for (row, slot) in lines.iter_mut().enumerate() {
        let y = rows.top + row as isize;
        if y >= 0 && y < rows.height as isize {
            *slot = Some(&rows.input[y as usize * line..][..line]);
        }
    }
    for column in 0..columns {
        let left = (side * column) as isize + rows.left;
        // Bᵀ d per patch column k: by_column[k][a].
        let mut by_column = [[[0f32; BLOCK]; N]; N];
        for (k, transformed) in by_column.iter_mut().enumerate() {
            let x = left + k as isize;
            let mut values = [[0f32; BLOCK]; N];
            if x >= 0 && (x as usize) < rows.width {
                for (value, line) in values.iter_mut().zip(&lines) {
                    if let Some(line) = line {
                        value.copy_from_slice(&line[x as usize * BLOCK..][..BLOCK]);
                    }
                }
            }
            *transformed = transform(&values);
        }
        // (Bᵀ d) B: the same along each row a.
        for a in 0..N {
            let mut values = [[0f32; BLOCK]; N];
            for (value, transformed) in values.iter_mut().zip(&by_column) {
                *value = transformed[a];
            }
            for (b, value) in transform(&values).iter().enumerate() {
                runs[a * N + b][column * BLOCK..][..BLOCK].copy_from_slice(value);
            }
        }
    }
}

/// `Aᵀ m A` of the tiles of tile row `tile_row`, for filter block `block`, finished and
/// stored in the image's output (the pixels inside it: a tile past an edge has rows or
/// columns less).
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
    let side = plan.tile.output();
    let run = plan.tiles.1 * BLOCK;
    let first = (block * tiles + tile_row * plan.tiles.1) * BLOCK;
    let products: [&[f32]; MAX_VALUES] = std::array::from_fn(|xi| {
        if xi < plan.tile.values() {
            // SAFETY: M[ξ][block][the row's tiles], inside the products, read only.
            unsafe { std::slice::from_raw_parts(m.at(xi * m_stride + first).cast_const(), run) }
        } else {
            &[]
        }
    });
    let line = width * BLOCK;
    let at = |row: usize| (block * height + side * tile_row + row) * line;
    let rows = side.min(height - side * tile_row);
    let mut lines: [&mut [f32]; MAX_SIDE] = std::array::from_fn(|row| {
        if row < rows {
            // SAFETY: this line of this block, this unit's alone (the function's
            // contract); the lines are disjoint.
            unsafe { std::slice::from_raw_parts_mut(out.at(at(row)), line) }
        } else {
            Default::default()
        }
    });
    transform_products(plan.tile, &products, plan.tiles.1, &mut lines[..rows]);
    for (row, values) in lines[..rows].iter_mut().enumerate() {
        // SAFETY: the residual has the output's layout, and this line is inside it.
        let residual = finish.residual.map(|residual| unsafe {
            std::slice::from_raw_parts(residual.at(at(row)).cast_const(), line)
        });
        scale_shift_lanes(values, finish.scale, finish.shift);
        if let Some(residual) = residual {
            add(values, residual);
        }
        finish.epilogue.apply(values);
    }
}

super::simd::multiversion! {
    /// The output pixels of the `columns` tiles of one tile row from their products
    /// (`products[ξ][column * 16..][..16]`), into its output lines (as many as are inside
    /// the output; the pixels past their end are dropped).
    fn transform_products(tile: Tile, products: &[&[f32]; MAX_VALUES], columns: usize, lines: &mut [&mut [f32]]) {
        match tile {
            Tile::Two => transform_products_of::<4, 2>(output_transform2, products, columns, lines),
            Tile::Four => transform_products_of::<6, 4>(output_transform4, products, columns, lines),
        }
    }
}

/// [`transform_products`] for products of side `N` and output tiles of side `M`, with
/// `Aᵀ x` (`transform`) of the products' rows and columns.
#[inline(always)]
fn transform_products_of<const N: usize, const M: usize>(
    transform: impl Fn(&[[f32; BLOCK]; N]) -> [[f32; BLOCK]; M],
    products: &[&[f32]; MAX_VALUES],
    columns: usize,
    lines: &mut [&mut [f32]],
) {
    for column in 0..columns {
        let at = column * BLOCK;
        // Aᵀ m per column k: by_column[k][r].
        let mut by_column = [[[0f32; BLOCK]; M]; N];
        for (k, transformed) in by_column.iter_mut().enumerate() {
            let mut values = [[0f32; BLOCK]; N];
            for (i, value) in values.iter_mut().enumerate() {
                value.copy_from_slice(&products[i * N + k][at..at + BLOCK]);
            }
            *transformed = transform(&values);
        }
        // (Aᵀ m) A: the same along each row r, into output line r.
        for (r, line) in lines.iter_mut().enumerate() {
            let mut values = [[0f32; BLOCK]; N];
            for (value, transformed) in values.iter_mut().zip(&by_column) {
                *value = transformed[r];
            }
            for (c, pixel) in transform(&values).iter().enumerate() {
                let x = (column * M + c) * BLOCK;
                if let Some(target) = line.get_mut(x..x + BLOCK) {
                    target.copy_from_slice(pixel);
                }
            }
        }
    }
}

super::simd::multiversion! {
    /// `values * scale + shift` of a run of pixels of one block of 16 filters (`scale`,
    /// `shift`: the block's 16).
    fn scale_shift_lanes(values: &mut [f32], scale: Option<&[f32]>, shift: Option<&[f32]>) {
        for pixel in values.chunks_exact_mut(BLOCK) {
            if let Some(scale) = scale {
                pixel.iter_mut().zip(scale).for_each(|(value, scale)| *value *= scale);
            }
            if let Some(shift) = shift {
                pixel.iter_mut().zip(shift).for_each(|(value, shift)| *value += shift);
            }
        }
    }
}

/// `Bᵀ x` for F(2x2, 3x3), lane by lane: the 4 values of one patch row or column.
#[inline(always)]
fn input_transform2(x: &[[f32; BLOCK]; 4]) -> [[f32; BLOCK]; 4] {
    let mut out = [[0f32; BLOCK]; 4];
    for lane in 0..BLOCK {
        let [x0, x1, x2, x3] = [0, 1, 2, 3].map(|i| x[i][lane]);
        out[0][lane] = x0 - x2;
        out[1][lane] = x1 + x2;
        out[2][lane] = x2 - x1;
        out[3][lane] = x1 - x3;
    }
    out
}

/// `Aᵀ x` for F(2x2, 3x3), lane by lane: 4 values of one product row or column to 2.
#[inline(always)]
fn output_transform2(x: &[[f32; BLOCK]; 4]) -> [[f32; BLOCK]; 2] {
    let mut out = [[0f32; BLOCK]; 2];
    for lane in 0..BLOCK {
        let [x0, x1, x2, x3] = [0, 1, 2, 3].map(|i| x[i][lane]);
        out[0][lane] = x0 + x1 + x2;
        out[1][lane] = x1 - x2 - x3;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{
        transform_panels_into, transform_products, transform_row, transform_weights, InputRows,
        Tile, BLOCK, MAX_VALUES, PANEL,
    };

    /// The transform of a kernel packed in filter panels is that of its OIHW form (in
    /// float32 against float64 arithmetic: within a few ulp), zeros past the last filter
    /// included: 70 filters (a panel and 6 filters of the next), 5 channels.
    #[test]
    fn kernels_in_filter_panels_transform_as_their_oihw_form() {
        let (filters, channels) = (70, 5);
        let oihw: Vec<f32> = (0..filters * channels * 9)
            .map(|index| ((index * 37 % 101) as f32 - 50.0) / 17.0)
            .collect();
        let panels = crate::panels::pack(channels * 9, filters, |row, filter| {
            oihw[filter * channels * 9 + row]
        });
        for tile in [Tile::Two, Tile::Four] {
            let expected = transform_weights(&oihw, filters, channels, tile);
            let mut actual = vec![f32::NAN; expected.len()];
            transform_panels_into(&panels, channels, tile, &mut actual);
            for (index, (actual, expected)) in actual.iter().zip(&expected).enumerate() {
                assert!(
                    (actual - expected).abs() <= 1e-6 * (1.0 + expected.abs()),
                    "{tile:?}, value {index}: {actual} vs {expected}"
                );
            }
            assert_eq!(expected.len(), tile.values() * 2 * channels * PANEL);
        }
    }

    #[test]
    fn the_transforms_compute_a_3x3_correlation_of_a_patch() {
        // With U = G g Gᵀ from winograd's weight transform, Aᵀ (U ⊙ Bᵀ d B) A is the
        // correlation of the patch d with g, lane by lane: 2x2 of a 4x4 patch, 4x4 of 6x6.
        // Two tiles side by side; the patch of the second reaches one column past the
        // input, read as zeros.
        let g: Vec<f32> = (0..9).map(|index| index as f32 * 0.25 - 1.0).collect();
        for tile in [Tile::Two, Tile::Four] {
            let (side, patch_side, values) = (tile.output(), tile.input(), tile.values());
            let (height, width) = (patch_side, side + patch_side - 1);
            let u = crate::winograd::transform_weights(&g, 1, 1, tile);
            let input: Vec<f32> = (0..height * width * BLOCK)
                .map(|index| (index * 7 + index / BLOCK * 3) as f32 % 5.0 - 2.0)
                .collect();
            let pixel = |y: usize, x: usize, lane: usize| {
                if x < width {
                    input[(y * width + x) * BLOCK + lane]
                } else {
                    0.0
                }
            };
            let rows = InputRows {
                input: &input,
                height,
                width,
                top: 0,
                left: 0,
            };
            let mut v = vec![vec![0f32; 2 * BLOCK]; MAX_VALUES];
            {
                let mut runs = v.iter_mut();
                let mut runs: [&mut [f32]; MAX_VALUES] =
                    std::array::from_fn(|_| runs.next().expect("a run per value").as_mut_slice());
                transform_row(tile, &rows, 2, &mut runs);
            }
            let products: Vec<Vec<f32>> = (0..MAX_VALUES)
                .map(|xi| {
                    (0..2 * BLOCK)
                        .map(|at| if xi < values { u[xi] * v[xi][at] } else { 0.0 })
                        .collect()
                })
                .collect();
            let products: [&[f32]; MAX_VALUES] = std::array::from_fn(|xi| &products[xi][..]);
            // Output lines one pixel short of the two tiles: the last pixel is dropped.
            let line = (2 * side - 1) * BLOCK;
            let mut out = vec![vec![f32::NAN; line]; side];
            {
                let mut lines: Vec<&mut [f32]> = out.iter_mut().map(|line| &mut line[..]).collect();
                transform_products(tile, &products, 2, &mut lines);
            }
            for (y, line) in out.iter().enumerate() {
                for (index, value) in line.iter().enumerate() {
                    let (x, lane) = (index / BLOCK, index % BLOCK);
                    let expected: f32 = (0..9)
                        .map(|tap| g[tap] * pixel(y + tap / 3, x + tap % 3, lane))
                        .sum();
                    assert!(
                        (value - expected).abs() < 1e-4,
                        "{tile:?} pixel ({y}, {x}) lane {lane}: {value} against {expected}"
                    );
                }
            }
        }
    }
}
