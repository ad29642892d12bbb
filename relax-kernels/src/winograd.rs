//! 3x3 convolutions with stride 1 by Winograd's minimal filtering F(m x m, 3x3), with
//! m = 2 or 4: each m x m block of output pixels (a tile) takes (m + 2)² multiply-adds
//! per filter and channel instead of 9m², 2.25 (m = 2) or 4 (m = 4) times fewer, for the
//! price of transforming the input tiles before the multiplications and the results
//! after them.
//!
//! With `d` a tile's (m + 2)² input patch and `g` a 3x3 kernel, the tile's output is
//! `Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`. The weights' part, `U = G g Gᵀ`, is computed once, when
//! relax-runtime loads the weights ([`transform_weights`]; relax-build marks the weights
//! it wants so); per call, the (m + 2)² elements of `⊙` become as many matrix
//! multiplications `M[ξ] = U[ξ] · V[ξ]` (filters x channels by channels x tiles), on
//! blocks of tiles small enough to stay in cache through all three steps. F(4x4, 3x3)
//! also moves fewer values through the transforms per output pixel (36 per 16 pixels
//! against 16 per 4), which is what makes it pay at 64 channels; its transforms'
//! constants are those of Lavin and Gray, "Fast Algorithms for Convolutional Neural
//! Networks" (2016).

use std::cell::RefCell;
use std::ops::Range;

use super::gemm::multiply;
use super::parallel::{chunk, Launch, Shared};
use super::scratch::{prefix, reuse};
use super::simd::avx512_available;
use super::strips::{multiply_strips, InRegisters, Product};

/// A Winograd variant: the side of its output tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tile {
    /// F(2x2, 3x3): 4x4 input patches, 16 values per transformed tile.
    Two,
    /// F(4x4, 3x3): 6x6 input patches, 36 values per transformed tile.
    Four,
}

impl Tile {
    /// Output pixels per side of a tile (m).
    pub(crate) fn output(self) -> usize {
        match self {
            Tile::Two => 2,
            Tile::Four => 4,
        }
    }

    /// Input pixels per side of a tile's patch (m + 2).
    pub(crate) fn input(self) -> usize {
        self.output() + 2
    }

    /// Values of a transformed tile or kernel: the multiplications per tile.
    pub fn values(self) -> usize {
        self.input() * self.input()
    }

    /// `G` of the kernel transform `U = G g Gᵀ`: `input()` rows of 3.
    pub(crate) fn kernel_transform(self) -> &'static [[f64; 3]] {
        match self {
            Tile::Two => &G2,
            Tile::Four => &G4,
        }
    }

    /// The variant whose transformed kernels have `values` values per kernel.
    pub fn of_values(values: usize) -> Option<Tile> {
        [Tile::Two, Tile::Four]
            .into_iter()
            .find(|tile| tile.values() == values)
    }
}

/// The transformed input of one block of tiles stays within this many bytes (it is
/// read once per block of filters).
const INPUT_BLOCK_BYTES: usize = 512 * 1024;

/// Below this many tiles per block, filters are the multiplications' wide axis (the
/// AVX-512 microkernel covers 64 values of it at a time).
const WIDE_TILES: usize = 64;

/// Fewer tiles than this per block are multiplied by the gemm crate (filters along its
/// vectors), not by strips (tiles along the vectors, the last one partly empty).
const MIN_STRIP_TILES: usize = 40;

/// Filters per block of the multiplications' results (`values x FILTER_BLOCK x tiles`).
const FILTER_BLOCK: usize = 64;

/// `U = G g Gᵀ` of every 3x3 kernel of `weights` (`[filters, channels, 3, 3]`), laid out
/// `[values, channels, filters]` (filters contiguous: the multiplications stream them).
pub fn transform_weights(weights: &[f32], filters: usize, channels: usize, tile: Tile) -> Vec<f32> {
    let mut out = vec![0.0; tile.values() * filters * channels];
    transform_weights_into(weights, filters, channels, tile, &mut out);
    out
}

/// `G` of F(2x2, 3x3).
const G2: [[f64; 3]; 4] = [
    [1.0, 0.0, 0.0],
    [0.5, 0.5, 0.5],
    [0.5, -0.5, 0.5],
    [0.0, 0.0, 1.0],
];

/// `G` of F(4x4, 3x3).
const G4: [[f64; 3]; 6] = [
    [1.0 / 4.0, 0.0, 0.0],
    [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
    [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
    [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
    [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
    [0.0, 0.0, 1.0],
];

/// [`transform_weights`] into `out` (`tile.values() * filters * channels` values, every
/// one written).
pub(crate) fn transform_weights_into(
    weights: &[f32],
    filters: usize,
    channels: usize,
    tile: Tile,
    out: &mut [f32],
) {
    let g = tile.kernel_transform();
    let side = g.len();
    for (index, kernel) in weights.chunks_exact(9).enumerate().take(filters * channels) {
        let (filter, channel) = (index / channels, index % channels);
        for (i, g_i) in g.iter().enumerate() {
            // Row i of G g: 3 values.
            let left: [f64; 3] = std::array::from_fn(|column| {
                (0..3)
                    .map(|t| g_i[t] * f64::from(kernel[t * 3 + column]))
                    .sum()
            });
            for (j, g_j) in g.iter().enumerate() {
                let value: f64 = (0..3).map(|t| left[t] * g_j[t]).sum();
                out[((i * side + j) * channels + channel) * filters + filter] = value as f32;
            }
        }
    }
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
    pub(crate) tile: Tile,
}

impl Plan {
    fn tiles(&self) -> (usize, usize) {
        let side = self.tile.output();
        (
            self.output_height.div_ceil(side),
            self.output_width.div_ceil(side),
        )
    }

    /// Tile rows per block: the transformed input within `INPUT_BLOCK_BYTES`, at least one.
    fn rows_per_block(&self) -> usize {
        let (_, tile_columns) = self.tiles();
        let per_row =
            self.tile.values() * self.channels * tile_columns * std::mem::size_of::<f32>();
        (INPUT_BLOCK_BYTES / per_row.max(1)).max(1)
    }
}

/// What follows the convolution on a run of one output row: `finish(image, filter,
/// first pixel of the run in the filter's plane, values)`, in place.
pub(crate) type Finish<'a> = &'a (dyn Fn(usize, usize, usize, &mut [f32]) + Sync);

/// Below this many tile rows (over all images), the tasks split the filters instead of
/// the rows: rows would split unevenly (7 rows on 2 threads are 4 + 3).
const MIN_ROWS_TO_SPLIT: usize = 12;

thread_local! {
    /// The buffers of the tasks that run on this thread.
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// `out = finish(conv3x3(x, w))` with `u` the weights' transform ([`transform_weights`]).
///
/// With enough tile rows, each task takes a near-equal share of them, for every filter;
/// with fewer, each task takes a share of the filters and transforms the whole input
/// itself (sharing one transform between the tasks, which then read the other's half
/// from its core, measured slower on ResNet-50's 14x14 layers).
///
/// # Safety
/// `x` holds `batch x channels x height x width`, `u` `values x channels x filters`,
/// `out` `batch x filters x output_height x output_width`, valid for the call, and `out`
/// overlaps neither.
pub(crate) unsafe fn winograd_into(
    plan: &Plan,
    x: *const f32,
    u: *const f32,
    out: Shared,
    finish: Finish<'_>,
    launch: Launch,
) -> Result<(), String> {
    let (tile_rows, tile_columns) = plan.tiles();
    let (channels, values) = (plan.channels, plan.tile.values());
    let plane = plan.height * plan.width;
    let rows_per_block = plan.rows_per_block();
    let total_rows = plan.batch * tile_rows;
    let (x, u) = (Shared(x.cast_mut()), Shared(u.cast_mut()));
    launch(false, &|task, tasks| {
        let (mine, filters) = if total_rows >= MIN_ROWS_TO_SPLIT {
            (chunk(total_rows, tasks, task, 1), 0..plan.filters)
        } else {
            (0..total_rows, chunk(plan.filters, tasks, task, 16))
        };
        if mine.is_empty() || filters.is_empty() {
            return;
        }
        reuse(&SCRATCH, |scratch| {
            // The rows of each image, in near-equal blocks of at most `rows_per_block`.
            let mut row = mine.start;
            while row < mine.end {
                let (image, first) = (row / tile_rows, row % tile_rows);
                let length = (tile_rows - first).min(mine.end - row);
                // SAFETY: image `image`'s planes of the checked input, read only.
                let input = unsafe {
                    std::slice::from_raw_parts(
                        x.at(image * channels * plane).cast_const(),
                        channels * plane,
                    )
                };
                let blocks = length.div_ceil(rows_per_block);
                for block in 0..blocks {
                    let rows = chunk(length, blocks, block, 1);
                    let rows = first + rows.start..first + rows.end;
                    let tiles = rows.len() * tile_columns;
                    let v = prefix(&mut scratch.input, values * channels * tiles);
                    transform_input(plan, input, rows.clone(), v, &mut scratch.padded);
                    let block = Block {
                        image,
                        rows,
                        filters: filters.clone(),
                    };
                    // SAFETY: the pointers address the checked tensors (this function's
                    // contract); this task writes the outputs of its rows and filters only.
                    unsafe { run(plan, v, u, out, &block, &mut scratch.results, finish) };
                }
                row += length;
            }
        })
    })
}

/// Buffers one task reuses from block to block (and, kept per thread, from call to call).
#[derive(Default)]
struct Scratch {
    /// `[values, channels, tiles]`.
    input: Vec<f32>,
    /// The phases of the input rows under a tile row.
    padded: Vec<f32>,
    results: Results,
}

/// The buffers of the multiplications and the output transform.
#[derive(Default)]
struct Results {
    /// `[values, filters of a block, tiles]`.
    products: Vec<f32>,
    /// The output rows of a tile row.
    output_rows: Vec<f32>,
    /// One product as `[tiles, filters]`, when there are few tiles.
    transposed: Vec<f32>,
}

/// The output one task computes at a time: tile rows `rows` of image `image`, for
/// filters `filters`.
struct Block {
    image: usize,
    rows: Range<usize>,
    filters: Range<usize>,
}

/// The multiplications and output transforms of one block, with `v` its tile rows'
/// transformed input (`[values, channels, tiles]`).
///
/// # Safety
/// As [`winograd_into`]; no other thread writes these filters' outputs in these rows.
unsafe fn run(
    plan: &Plan,
    v: &[f32],
    u: Shared,
    out: Shared,
    block: &Block,
    scratch: &mut Results,
    finish: Finish<'_>,
) {
    let (_, tile_columns) = plan.tiles();
    let (image, rows, filters) = (block.image, block.rows.clone(), block.filters.clone());
    let tiles = rows.len() * tile_columns;
    let channels = plan.channels;
    let values = plan.tile.values();
    let output_plane = plan.output_height * plan.output_width;
    let side = plan.tile.output();
    let strips = avx512_available() && tiles >= MIN_STRIP_TILES;
    for block_start in filters.clone().step_by(FILTER_BLOCK) {
        let block = block_start..(block_start + FILTER_BLOCK).min(filters.end);
        let count = values * block.len() * tiles;
        let products = Shared(prefix(&mut scratch.products, count).as_mut_ptr());
        let wide_tiles = tiles >= WIDE_TILES;
        for xi in 0..values {
            let v = v[xi * channels * tiles..].as_ptr();
            // U[ξ][channel][filter], from this block's first filter.
            let u_block = u
                .at(xi * channels * plan.filters + block.start)
                .cast_const();
            let product = products.at(xi * block.len() * tiles);
            if strips {
                let operands = Product {
                    depth: channels,
                    w: u_block,
                    w_filter_stride: 1,
                    w_depth_stride: plan.filters,
                    x: v,
                    x_stride: tiles,
                    out: Shared(product),
                    out_stride: tiles,
                };
                // SAFETY: AVX-512F is there (`strips`); U[ξ]'s columns of this block's
                // filters, V[ξ] (`channels x tiles`), into this task's own buffer of block
                // filters x tiles.
                unsafe {
                    multiply_strips(
                        &operands,
                        0..block.len(),
                        0..tiles,
                        &InRegisters::default(),
                        None,
                    )
                };
                continue;
            }
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
            let transposed = prefix(&mut scratch.transposed, block.len() * tiles);
            // SAFETY: V[ξ] read as its transpose (tiles x channels), U[ξ]'s block
            // (channels x block filters), into this task's own tiles x filters buffer.
            unsafe {
                multiply(
                    (tiles, block.len(), channels),
                    (transposed.as_mut_ptr(), 1, block.len()),
                    (v, tiles, 1),
                    (u_block, 1, plan.filters),
                    1.0,
                )
            };
            // SAFETY: this block's ξ-th product buffer, this task's alone.
            let product = unsafe { std::slice::from_raw_parts_mut(product, block.len() * tiles) };
            for (tile, row) in transposed.chunks_exact(block.len()).enumerate() {
                for (filter, value) in row.iter().enumerate() {
                    product[filter * tiles + tile] = *value;
                }
            }
        }
        let products = &scratch.products[..count];
        let stride = block.len() * tiles;
        for (index, filter) in block.clone().enumerate() {
            let first_output = (image * plan.filters + filter) * output_plane;
            for (row_index, tile_row) in rows.clone().enumerate() {
                let offset = index * tiles + row_index * tile_columns;
                let rows_out = prefix(&mut scratch.output_rows, side * side * tile_columns);
                match plan.tile {
                    Tile::Two => transform_output(products, stride, offset, tile_columns, rows_out),
                    Tile::Four => {
                        transform_output4(products, stride, offset, tile_columns, rows_out)
                    }
                }
                for line in 0..side {
                    let y = side * tile_row + line;
                    if y >= plan.output_height {
                        break;
                    }
                    let pixel = y * plan.output_width;
                    let first = line * side * tile_columns;
                    let source = &rows_out[first..first + plan.output_width];
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
    let (side, patch) = (plan.tile.output(), plan.tile.input());
    // Each of the input rows under a tile row, zero-padded and split into `side` phases
    // (the columns at positions p, p + side, p + 2 side, ... from column -pad_left), so
    // that every patch column is a contiguous run over the tiles: column k of tile t is
    // phase k % side at t + k / side.
    let phase_length = tile_columns.next_multiple_of(LANES) + 1;
    let padded = prefix(padded, patch * side * phase_length);
    let plane = plan.height * plan.width;
    let stride = plan.channels * tiles;
    // Input column c sits at padded position c + pad_left; the columns that fit.
    let fitting = plan
        .width
        .min((side * phase_length).saturating_sub(plan.pad_left));
    for channel in 0..plan.channels {
        let source = &input[channel * plane..(channel + 1) * plane];
        for (row_index, tile_row) in rows.clone().enumerate() {
            for i in 0..patch {
                let lines = &mut padded[i * side * phase_length..(i + 1) * side * phase_length];
                lines.fill(0.0);
                let y = (side * tile_row + i) as isize - plan.pad_top as isize;
                if y < 0 || y as usize >= plan.height {
                    continue;
                }
                let line = &source[y as usize * plan.width..][..fitting];
                for (phase, phase_line) in lines.chunks_exact_mut(phase_length).enumerate() {
                    // The first input column at this phase, and its place in the phase.
                    let first = (phase + side - plan.pad_left % side) % side;
                    let start = (first + plan.pad_left) / side;
                    for (slot, &value) in phase_line[start..]
                        .iter_mut()
                        .zip(line.iter().skip(first).step_by(side))
                    {
                        *slot = value;
                    }
                }
            }
            let base = channel * tiles + row_index * tile_columns;
            match plan.tile {
                Tile::Two => {
                    transform_tile_row(padded, phase_length, tile_columns, v, stride, base)
                }
                Tile::Four => {
                    transform_tile_row4(padded, phase_length, tile_columns, v, stride, base)
                }
            }
        }
    }
}

super::simd::multiversion! {
    // The index arithmetic spells out the transform's formulas.
    #[allow(clippy::needless_range_loop)]
    /// The input transforms of one row of tiles from its 4 rows' even and odd columns
    /// (`padded`: even 0, odd 0, even 1, ... each `phase_length` long).
    fn transform_tile_row(
        padded: &[f32],
        phase_length: usize,
        tile_columns: usize,
        v: &mut [f32],
        stride: usize,
        base: usize,
    ) {
        for first in (0..tile_columns).step_by(LANES) {
            // d[i][k] for LANES tiles: columns 2j + k of row i.
            let mut d = [[[0f32; LANES]; 4]; 4];
            for (i, row) in d.iter_mut().enumerate() {
                let even = &padded[2 * i * phase_length + first..2 * i * phase_length + first + LANES + 1];
                let odd = &padded[(2 * i + 1) * phase_length + first..(2 * i + 1) * phase_length + first + LANES + 1];
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
        rows: &mut [f32],
    ) {
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

/// `Bᵀ x` for F(4x4, 3x3), lane by lane: the 6 values of one patch row or column.
#[inline(always)]
pub(super) fn input_transform4(x: &[[f32; LANES]; 6]) -> [[f32; LANES]; 6] {
    let mut out = [[0f32; LANES]; 6];
    for lane in 0..LANES {
        let [x0, x1, x2, x3, x4, x5] = [0, 1, 2, 3, 4, 5].map(|i| x[i][lane]);
        out[0][lane] = 4.0 * x0 - 5.0 * x2 + x4;
        out[1][lane] = -4.0 * (x1 + x2) + x3 + x4;
        out[2][lane] = 4.0 * (x1 - x2) - x3 + x4;
        out[3][lane] = 2.0 * (x3 - x1) - x2 + x4;
        out[4][lane] = 2.0 * (x1 - x3) - x2 + x4;
        out[5][lane] = 4.0 * x1 - 5.0 * x3 + x5;
    }
    out
}

/// `Aᵀ x` for F(4x4, 3x3), lane by lane: 6 values of one product row or column to 4.
#[inline(always)]
pub(super) fn output_transform4(x: &[[f32; LANES]; 6]) -> [[f32; LANES]; 4] {
    let mut out = [[0f32; LANES]; 4];
    for lane in 0..LANES {
        let [x0, x1, x2, x3, x4, x5] = [0, 1, 2, 3, 4, 5].map(|i| x[i][lane]);
        let (sum12, difference12) = (x1 + x2, x1 - x2);
        let (sum34, difference34) = (x3 + x4, x3 - x4);
        out[0][lane] = x0 + sum12 + sum34;
        out[1][lane] = difference12 + 2.0 * difference34;
        out[2][lane] = sum12 + 4.0 * sum34;
        out[3][lane] = difference12 + 8.0 * difference34 + x5;
    }
    out
}

super::simd::multiversion! {
    // k indexes both the patch columns and the transposed results.
    #[allow(clippy::needless_range_loop)]
    /// F(4x4, 3x3)'s input transforms of one row of tiles from its 6 rows' 4 phases
    /// (`padded`: row 0 phases 0-3, row 1 phases 0-3, ... each `phase_length` long).
    fn transform_tile_row4(
        padded: &[f32],
        phase_length: usize,
        tile_columns: usize,
        v: &mut [f32],
        stride: usize,
        base: usize,
    ) {
        for first in (0..tile_columns).step_by(LANES) {
            let count = LANES.min(tile_columns - first);
            // Bᵀ d per patch column k (down the 6 rows): rows[a][k].
            let mut rows = [[[0f32; LANES]; 6]; 6];
            for k in 0..6 {
                let column: [[f32; LANES]; 6] = std::array::from_fn(|i| {
                    let at = (i * 4 + k % 4) * phase_length + first + k / 4;
                    padded[at..at + LANES].try_into().expect("LANES values")
                });
                for (a, value) in input_transform4(&column).into_iter().enumerate() {
                    rows[a][k] = value;
                }
            }
            // (Bᵀ d) B: the same transform along each row a.
            for (a, row) in rows.iter().enumerate() {
                for (b, values) in input_transform4(row).iter().enumerate() {
                    let at = (a * 6 + b) * stride + base + first;
                    v[at..at + count].copy_from_slice(&values[..count]);
                }
            }
        }
    }
}

super::simd::multiversion! {
    // k indexes both the patch columns and the transposed results.
    #[allow(clippy::needless_range_loop)]
    /// F(4x4, 3x3)'s `Aᵀ m A` of the tiles of one tile row of one filter:
    /// `products[ξ * stride + offset + column]` -> four output rows of `4 * tile_columns`
    /// pixels, one after the other.
    fn transform_output4(
        products: &[f32],
        stride: usize,
        offset: usize,
        tile_columns: usize,
        rows: &mut [f32],
    ) {
        let width = 4 * tile_columns;
        for first in (0..tile_columns).step_by(LANES) {
            let count = LANES.min(tile_columns - first);
            // Aᵀ m per column k (down the 6 rows): partial[r][k].
            let mut partial = [[[0f32; LANES]; 6]; 4];
            for k in 0..6 {
                let column: [[f32; LANES]; 6] = std::array::from_fn(|i| {
                    let at = (i * 6 + k) * stride + offset + first;
                    let mut values = [0f32; LANES];
                    values[..count].copy_from_slice(&products[at..at + count]);
                    values
                });
                for (r, value) in output_transform4(&column).into_iter().enumerate() {
                    partial[r][k] = value;
                }
            }
            for (r, partial) in partial.iter().enumerate() {
                let y = output_transform4(partial);
                let line = &mut rows[r * width..(r + 1) * width];
                for lane in 0..count {
                    let column = 4 * (first + lane);
                    for (c, y) in y.iter().enumerate() {
                        line[column + c] = y[lane];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
