//! 3x3 convolutions with stride 1 by Winograd's minimal filtering F(2x2, 3x3): each 2x2
//! block of output pixels (a tile) takes 16 multiply-adds per filter and channel instead
//! of 36, 2.25 times fewer, for the price of transforming the input tiles before the
//! multiplications and the results after them.
//!
//! With `d` a tile's 4x4 input patch and `g` a 3x3 kernel, the tile's output is
//! `Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`. The weights' part, `U = G g Gᵀ`, is computed once, when
//! relax-runtime loads the weights ([`transform_weights`]; relax-build marks the weights
//! it wants so); per call, the 16 elements of `⊙` become 16 matrix multiplications
//! `M[ξ] = U[ξ] · V[ξ]` (filters x channels by channels x tiles), on blocks of tiles small
//! enough to stay in cache through all three steps.

use std::ops::Range;

use super::gemm::multiply;
use super::parallel::{chunk, Executor, Shared};

/// Values of a transformed tile (4x4).
pub(crate) const TILE_VALUES: usize = 16;

/// The transformed input of one block of tiles stays within this many bytes (it is
/// read once per block of filters).
const INPUT_BLOCK_BYTES: usize = 512 * 1024;

/// Below this many tiles per block, filters are the multiplications' wide axis (the
/// AVX-512 microkernel covers 64 values of it at a time).
const WIDE_TILES: usize = 64;

/// Filters per block of the multiplications' results (`16 x FILTER_BLOCK x tiles`).
const FILTER_BLOCK: usize = 64;

/// `U = G g Gᵀ` of every 3x3 kernel of `weights` (`[filters, channels, 3, 3]`), laid out
/// `[16, channels, filters]` (filters contiguous: the multiplications stream them).
pub(crate) fn transform_weights(weights: &[f32], filters: usize, channels: usize) -> Vec<f32> {
    const G: [[f32; 3]; 4] = [
        [1.0, 0.0, 0.0],
        [0.5, 0.5, 0.5],
        [0.5, -0.5, 0.5],
        [0.0, 0.0, 1.0],
    ];
    let mut out = vec![0.0; TILE_VALUES * filters * channels];
    for (index, kernel) in weights.chunks_exact(9).enumerate().take(filters * channels) {
        // G g: 4x3.
        let mut left = [[0f32; 3]; 4];
        for (row, g_row) in left.iter_mut().zip(&G) {
            for (column, value) in row.iter_mut().enumerate() {
                *value = (0..3).map(|i| g_row[i] * kernel[i * 3 + column]).sum();
            }
        }
        // (G g) Gᵀ: 4x4.
        for (i, left_row) in left.iter().enumerate() {
            for (j, g_row) in G.iter().enumerate() {
                let value: f32 = (0..3).map(|t| left_row[t] * g_row[t]).sum();
                let (filter, channel) = (index / channels, index % channels);
                out[((i * 4 + j) * channels + channel) * filters + filter] = value;
            }
        }
    }
    out
}

/// The sizes of one convolution Winograd computes (3x3 kernel, stride 1, no dilation,
/// one group).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) batch: usize,
    pub(crate) channels: usize,
    pub(crate) height: usize,
    pub(crate) width: usize,
    pub(crate) filters: usize,
    /// Padding above and to the left (below and to the right follows from the output).
    pub(crate) pad_top: usize,
    pub(crate) pad_left: usize,
    pub(crate) output_height: usize,
    pub(crate) output_width: usize,
}

impl Plan {
    fn tiles(&self) -> (usize, usize) {
        (
            self.output_height.div_ceil(2),
            self.output_width.div_ceil(2),
        )
    }

    /// Tile rows per block: the transformed input within `INPUT_BLOCK_BYTES`, at least one.
    fn rows_per_block(&self) -> usize {
        let (_, tile_columns) = self.tiles();
        let per_row = TILE_VALUES * self.channels * tile_columns * std::mem::size_of::<f32>();
        (INPUT_BLOCK_BYTES / per_row.max(1)).max(1)
    }
}

/// What follows the convolution on a run of one output row: `finish(image, filter,
/// first pixel of the run in the filter's plane, values)`, in place.
pub(crate) type Finish<'a> = &'a (dyn Fn(usize, usize, usize, &mut [f32]) + Sync);

/// `out = finish(conv3x3(x, w))` with `u` the weights' transform ([`transform_weights`]).
///
/// # Safety
/// `x` holds `batch x channels x height x width`, `u` `16 x channels x filters`, `out`
/// `batch x filters x output_height x output_width`, valid for the call, and `out`
/// overlaps neither.
pub(crate) unsafe fn winograd_into(
    plan: &Plan,
    x: *const f32,
    u: *const f32,
    out: Shared,
    finish: Finish<'_>,
    executor: Executor,
) -> Result<(), String> {
    let (tile_rows, _) = plan.tiles();
    let rows_per_block = plan.rows_per_block();
    let blocks_per_image = tile_rows.div_ceil(rows_per_block);
    let blocks = plan.batch * blocks_per_image;
    let (x, u) = (Shared(x.cast_mut()), Shared(u.cast_mut()));
    executor(false, &|task, tasks| {
        // Enough blocks: each task takes whole blocks; else each takes a share of the
        // filters of every block (transforming the same input).
        let (my_blocks, filters) = if blocks >= 2 * tasks {
            (chunk(blocks, tasks, task, 1), 0..plan.filters)
        } else {
            (0..blocks, chunk(plan.filters, tasks, task, 16))
        };
        if my_blocks.is_empty() || filters.is_empty() {
            return;
        }
        let mut scratch = Scratch::default();
        for block in my_blocks {
            let image = block / blocks_per_image;
            let first_row = block % blocks_per_image * rows_per_block;
            let rows = first_row..(first_row + rows_per_block).min(tile_rows);
            // SAFETY: the pointers address the checked tensors (this function's
            // contract); this task writes the output pixels of its block and filters only.
            unsafe {
                run_block(
                    plan,
                    x,
                    u,
                    out,
                    image,
                    rows,
                    filters.clone(),
                    &mut scratch,
                    finish,
                )
            };
        }
    })
}

/// Buffers one task reuses from block to block.
#[derive(Default)]
struct Scratch {
    /// `[16, channels, tiles]`.
    input: Vec<f32>,
    /// `[16, filters of a block, tiles]`.
    products: Vec<f32>,
    /// Four padded input rows.
    padded: Vec<f32>,
    /// Two output rows.
    output_rows: Vec<f32>,
    /// One product as `[tiles, filters]`, when there are few tiles.
    transposed: Vec<f32>,
}

/// One block: the tiles of rows `rows` of image `image`, for filters `filters`.
///
/// # Safety
/// As [`winograd_into`]; no other thread writes these filters' outputs in these rows.
#[allow(clippy::too_many_arguments)]
unsafe fn run_block(
    plan: &Plan,
    x: Shared,
    u: Shared,
    out: Shared,
    image: usize,
    rows: Range<usize>,
    filters: Range<usize>,
    scratch: &mut Scratch,
    finish: Finish<'_>,
) {
    let (_, tile_columns) = plan.tiles();
    let tiles = rows.len() * tile_columns;
    let channels = plan.channels;
    let plane = plan.height * plan.width;
    scratch.input.resize(TILE_VALUES * channels * tiles, 0.0);
    // SAFETY: image `image`'s planes of the checked input, read only.
    let input = unsafe {
        std::slice::from_raw_parts(
            x.at(image * channels * plane).cast_const(),
            channels * plane,
        )
    };
    transform_input(
        plan,
        input,
        rows.clone(),
        &mut scratch.input,
        &mut scratch.padded,
    );
    let output_plane = plan.output_height * plan.output_width;
    for block_start in filters.clone().step_by(FILTER_BLOCK) {
        let block = block_start..(block_start + FILTER_BLOCK).min(filters.end);
        scratch
            .products
            .resize(TILE_VALUES * block.len() * tiles, 0.0);
        let products = Shared(scratch.products.as_mut_ptr());
        let wide_tiles = tiles >= WIDE_TILES;
        if !wide_tiles {
            scratch.transposed.resize(block.len() * tiles, 0.0);
        }
        for xi in 0..TILE_VALUES {
            let v = scratch.input[xi * channels * tiles..].as_ptr();
            // U[ξ][channel][filter], from this block's first filter.
            let u_block = u
                .at(xi * channels * plan.filters + block.start)
                .cast_const();
            let product = products.at(xi * block.len() * tiles);
            if wide_tiles {
                // SAFETY: U[ξ]'s columns of this block's filters (`channels` rows of
                // `filters`), V[ξ] (`channels x tiles`), into this task's own buffer of
                // block filters x tiles.
                unsafe {
                    multiply(
                        (block.len(), tiles, channels),
                        (product, 1, tiles),
                        (u_block, plan.filters, 1),
                        (v, 1, tiles),
                        1.0,
                    )
                };
                continue;
            }
            // Few tiles: the product is computed as [tiles, filters] (filters are the
            // microkernel's wide axis), then transposed.
            let transposed = scratch.transposed.as_mut_ptr();
            // SAFETY: V[ξ] read as its transpose (tiles x channels), U[ξ]'s block
            // (channels x block filters), into this task's own tiles x filters buffer.
            unsafe {
                multiply(
                    (tiles, block.len(), channels),
                    (transposed, 1, block.len()),
                    (v, tiles, 1),
                    (u_block, 1, plan.filters),
                    1.0,
                )
            };
            // SAFETY: this block's ξ-th product buffer, this task's alone.
            let product = unsafe { std::slice::from_raw_parts_mut(product, block.len() * tiles) };
            for (tile, row) in scratch.transposed.chunks_exact(block.len()).enumerate() {
                for (filter, value) in row.iter().enumerate() {
                    product[filter * tiles + tile] = *value;
                }
            }
        }
        for (index, filter) in block.clone().enumerate() {
            let first_output = (image * plan.filters + filter) * output_plane;
            for (row_index, tile_row) in rows.clone().enumerate() {
                let offset = index * tiles + row_index * tile_columns;
                transform_output(
                    &scratch.products,
                    block.len() * tiles,
                    offset,
                    tile_columns,
                    &mut scratch.output_rows,
                );
                for half in 0..2 {
                    let y = 2 * tile_row + half;
                    if y >= plan.output_height {
                        break;
                    }
                    let pixel = y * plan.output_width;
                    let source = &scratch.output_rows
                        [half * 2 * tile_columns..half * 2 * tile_columns + plan.output_width];
                    // SAFETY: row `y` of this filter's output plane, written by this
                    // task only (its block's rows, its filters).
                    let destination = unsafe {
                        std::slice::from_raw_parts_mut(
                            out.at(first_output + pixel),
                            plan.output_width,
                        )
                    };
                    destination.copy_from_slice(source);
                    finish(image, filter, pixel, destination);
                }
            }
        }
    }
}

/// Tiles the transforms handle at a time (one AVX-512 vector of each value).
const LANES: usize = 16;

/// `V = Bᵀ d B` of every tile of tile rows `rows`, for every channel, into
/// `v[ξ][channel][tile]`.
fn transform_input(
    plan: &Plan,
    input: &[f32],
    rows: Range<usize>,
    v: &mut [f32],
    padded: &mut Vec<f32>,
) {
    let (_, tile_columns) = plan.tiles();
    let tiles = rows.len() * tile_columns;
    // Each of the 4 input rows under a tile row, zero-padded and split into its even
    // and odd columns (from column -pad_left), so that every patch column is a
    // contiguous run over the tiles.
    let half = tile_columns.next_multiple_of(LANES) + 1;
    padded.resize(8 * half, 0.0);
    let plane = plan.height * plan.width;
    let stride = plan.channels * tiles;
    for channel in 0..plan.channels {
        let source = &input[channel * plane..(channel + 1) * plane];
        for (row_index, tile_row) in rows.clone().enumerate() {
            for i in 0..4 {
                let (even, odd) = padded[2 * i * half..(2 * i + 2) * half].split_at_mut(half);
                even.fill(0.0);
                odd.fill(0.0);
                let y = (2 * tile_row + i) as isize - plan.pad_top as isize;
                if y < 0 || y as usize >= plan.height {
                    continue;
                }
                // Input column c sits at padded position c + pad_left; the columns that
                // fit go to the even or odd half by that position's parity.
                let fitting = plan.width.min((2 * half).saturating_sub(plan.pad_left));
                let line = &source[y as usize * plan.width..][..fitting];
                let parity = plan.pad_left % 2;
                let even_start = (plan.pad_left + parity) / 2;
                let odd_start = (plan.pad_left - parity) / 2;
                for (slot, &value) in even[even_start..]
                    .iter_mut()
                    .zip(line.iter().skip(parity).step_by(2))
                {
                    *slot = value;
                }
                for (slot, &value) in odd[odd_start..]
                    .iter_mut()
                    .zip(line.iter().skip(1 - parity).step_by(2))
                {
                    *slot = value;
                }
            }
            let base = channel * tiles + row_index * tile_columns;
            transform_tile_row(padded, half, tile_columns, v, stride, base);
        }
    }
}

super::simd::multiversion! {
    // The index arithmetic spells out the transform's formulas.
    #[allow(clippy::needless_range_loop)]
    /// The input transforms of one row of tiles from its 4 rows' even and odd columns
    /// (`padded`: even 0, odd 0, even 1, ... each `half` long).
    fn transform_tile_row(
        padded: &[f32],
        half: usize,
        tile_columns: usize,
        v: &mut [f32],
        stride: usize,
        base: usize,
    ) {
        for first in (0..tile_columns).step_by(LANES) {
            // d[i][k] for LANES tiles: columns 2j + k of row i.
            let mut d = [[[0f32; LANES]; 4]; 4];
            for (i, row) in d.iter_mut().enumerate() {
                let even = &padded[2 * i * half + first..2 * i * half + first + LANES + 1];
                let odd = &padded[(2 * i + 1) * half + first..(2 * i + 1) * half + first + LANES + 1];
                row[0].copy_from_slice(&even[..LANES]);
                row[1].copy_from_slice(&odd[..LANES]);
                row[2].copy_from_slice(&even[1..]);
                row[3].copy_from_slice(&odd[1..]);
            }
            let count = LANES.min(tile_columns - first);
            for k in 0..4 {
                // Bᵀ d (rows), for patch column k.
                let mut t = [[0f32; LANES]; 4];
                for lane in 0..LANES {
                    let (d0, d1, d2, d3) = (d[0][k][lane], d[1][k][lane], d[2][k][lane], d[3][k][lane]);
                    t[0][lane] = d0 - d2;
                    t[1][lane] = d1 + d2;
                    t[2][lane] = d2 - d1;
                    t[3][lane] = d1 - d3;
                }
                // Stored transposed for now: column k of the row transform.
                for (a, t) in t.iter().enumerate() {
                    d[a][k] = *t;
                }
            }
            // (Bᵀ d) B (columns), per row a of the row transform.
            for a in 0..4 {
                let t = &d[a];
                let mut values = [[0f32; LANES]; 4];
                for lane in 0..LANES {
                    values[0][lane] = t[0][lane] - t[2][lane];
                    values[1][lane] = t[1][lane] + t[2][lane];
                    values[2][lane] = t[2][lane] - t[1][lane];
                    values[3][lane] = t[1][lane] - t[3][lane];
                }
                for (b, values) in values.iter().enumerate() {
                    let at = (a * 4 + b) * stride + base + first;
                    v[at..at + count].copy_from_slice(&values[..count]);
                }
            }
        }
    }
}

super::simd::multiversion! {
    // The index arithmetic spells out the transform's formulas.
    #[allow(clippy::needless_range_loop)]
    /// `Aᵀ m A` of the tiles of one tile row of one filter: `products[ξ * stride + offset
    /// + column]` -> two output rows of `2 * tile_columns` pixels, one after the other.
    fn transform_output(
        products: &[f32],
        stride: usize,
        offset: usize,
        tile_columns: usize,
        rows: &mut Vec<f32>,
    ) {
        rows.resize(4 * tile_columns, 0.0);
        let (top, bottom) = rows.split_at_mut(2 * tile_columns);
        for first in (0..tile_columns).step_by(LANES) {
            let count = LANES.min(tile_columns - first);
            let mut m = [[0f32; LANES]; 16];
            for (xi, m) in m.iter_mut().enumerate() {
                let at = xi * stride + offset + first;
                m[..count].copy_from_slice(&products[at..at + count]);
            }
            let mut y = [[0f32; LANES]; 4];
            for lane in 0..LANES {
                // Aᵀ m: rows 0 + 1 + 2 and 1 - 2 - 3, per column k.
                let mut s = [[0f32; 4]; 2];
                for k in 0..4 {
                    s[0][k] = m[k][lane] + m[4 + k][lane] + m[8 + k][lane];
                    s[1][k] = m[4 + k][lane] - m[8 + k][lane] - m[12 + k][lane];
                }
                y[0][lane] = s[0][0] + s[0][1] + s[0][2];
                y[1][lane] = s[0][1] - s[0][2] - s[0][3];
                y[2][lane] = s[1][0] + s[1][1] + s[1][2];
                y[3][lane] = s[1][1] - s[1][2] - s[1][3];
            }
            for lane in 0..count {
                let column = first + lane;
                top[2 * column] = y[0][lane];
                top[2 * column + 1] = y[1][lane];
                bottom[2 * column] = y[2][lane];
                bottom[2 * column + 1] = y[3][lane];
            }
        }
    }
}

#[cfg(test)]
mod tests;
