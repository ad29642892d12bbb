//! Dense layers over weights packed once, at load, into column panels: `[N, K]` or
//! `[K, N]` weights become `[ceil(N / 64), K, 64]` (zero-padded), so that a panel's
//! 64 columns for each k are one contiguous run. The multiplication then streams each
//! panel straight from memory (no per-call packing, unlike a general GEMM) and applies
//! the bias, residual and activation to each tile while it is in registers or L1.
//!
//! On CPUs with AVX-512 a 6 x 64 tile keeps 24 vector accumulators. With AVX2, each
//! panel is multiplied as a `k x 64` matrix by the gemm crate's kernels (one core,
//! MiniLM's layers: 85-88 GFLOP/s, against 74-81 for a 6 x 16 tile of our own and 80-84
//! for the crate on the unpacked weights), then the bias and residual added; elsewhere
//! (NEON) a portable 4 x 16 tile that the compiler vectorizes for the running CPU.

use super::epilogue::{add, Epilogue};
use super::parallel::{chunk, Launch, Shared, INLINE_WORK};
use super::simd::Isa;

/// Columns per panel.
pub const PANEL: usize = 64;

/// Packs weights into panels: `weight(k, n)` reads element (k, n) of the `k x n` matrix
/// the layer multiplies by.
pub fn pack(k: usize, n: usize, weight: impl Fn(usize, usize) -> f32) -> Vec<f32> {
    let panels = n.div_ceil(PANEL);
    let mut out = vec![0.0; panels * k * PANEL];
    for panel in 0..panels {
        let columns = PANEL.min(n - panel * PANEL);
        for row in 0..k {
            let run = &mut out[(panel * k + row) * PANEL..][..columns];
            for (offset, slot) in run.iter_mut().enumerate() {
                *slot = weight(row, panel * PANEL + offset);
            }
        }
    }
    out
}

/// What follows the product: a bias per column, a residual of the output's shape, an
/// activation.
#[derive(Clone, Copy)]
pub(crate) struct After<'a> {
    pub(crate) bias: Option<&'a [f32]>,
    pub(crate) residual: Option<*const f32>,
    pub(crate) epilogue: Epilogue,
}

/// `out[m, n] = epilogue(x[m, k] · W + bias + residual)` with `W` packed by [`pack`],
/// split over the pool by panels, with the tiles of `isa`.
///
/// # Safety
/// `x` holds `m x k`, `panels` the packed `k x n` weights, `after.bias` `n` values,
/// `after.residual` and `out` `m x n`, valid for the call; `out` overlaps none of them;
/// `isa` one this CPU runs ([`Isa::runs_here`]).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn dense_panels_into(
    m: usize,
    n: usize,
    k: usize,
    x: *const f32,
    panels: *const f32,
    after: After<'_>,
    out: Shared,
    launch: Launch,
    isa: Isa,
) -> Result<(), String> {
    let count = n.div_ceil(PANEL);
    let (x, panels) = (Shared(x.cast_mut()), Shared(panels.cast_mut()));
    let residual = after.residual.map(|residual| Shared(residual.cast_mut()));
    launch(m * n * k < INLINE_WORK, &|task, tasks| {
        for panel in chunk(count, tasks, task, 1) {
            let block = Block {
                m,
                n,
                k,
                x: x.get(),
                panel: panels.at(panel * k * PANEL),
                first_column: panel * PANEL,
                columns: PANEL.min(n - panel * PANEL),
                bias: after.bias,
                residual: residual.map(Shared::get),
                out,
            };
            // SAFETY: the panel's columns of `out` belong to this task alone; the
            // pointers address the checked tensors (this function's contract).
            unsafe {
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 => avx512::block(&block),
                    Isa::Avx2 => crate_block(&block),
                    _ => portable_block(&block),
                }
            }
            apply_activation(&block, after.epilogue);
        }
    })
}

/// One panel's columns of the whole output.
struct Block<'a> {
    m: usize,
    n: usize,
    k: usize,
    x: *const f32,
    /// `k x 64` contiguous.
    panel: *const f32,
    first_column: usize,
    /// The panel's real columns (64 but for the last panel).
    columns: usize,
    bias: Option<&'a [f32]>,
    residual: Option<*mut f32>,
    out: Shared,
}

/// The activation over the block's rows (the sums, bias and residual are in already).
fn apply_activation(block: &Block<'_>, epilogue: Epilogue) {
    if epilogue == Epilogue::None {
        return;
    }
    for row in 0..block.m {
        // SAFETY: this block's columns of row `row`, written by this task only.
        let values = unsafe {
            std::slice::from_raw_parts_mut(
                block.out.at(row * block.n + block.first_column),
                block.columns,
            )
        };
        epilogue.apply(values);
    }
}

/// The block on the gemm crate's kernels (the panel read as a `k x 64` matrix).
///
/// # Safety
/// As `dense_panels_into`, for this block.
unsafe fn crate_block(block: &Block<'_>) {
    // SAFETY: the caller's contract: x is `m x k`, the panel `k x 64`, and the block's
    // columns of out are this task's alone.
    unsafe {
        ::gemm::gemm(
            block.m,
            block.columns,
            block.k,
            block.out.at(block.first_column),
            1,
            block.n as isize,
            false,
            block.x,
            1,
            block.k as isize,
            block.panel,
            1,
            PANEL as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            ::gemm::Parallelism::None,
        );
    }
    for row in 0..block.m {
        add_bias_and_residual(block, row, 0, block.columns);
    }
}

/// The block on any CPU: 4-row x 16-column tiles the compiler vectorizes.
///
/// # Safety
/// As `dense_panels_into`, for this block.
unsafe fn portable_block(block: &Block<'_>) {
    const ROWS: usize = 4;
    const WIDTH: usize = 16;
    for first in (0..block.columns).step_by(WIDTH) {
        let width = WIDTH.min(block.columns - first);
        for row in (0..block.m).step_by(ROWS) {
            let rows = ROWS.min(block.m - row);
            let mut sums = [[0f32; WIDTH]; ROWS];
            // SAFETY: rows `row..row + rows` of x and the panel's k rows, in bounds.
            unsafe { portable_tile(block, row, rows, first, &mut sums) };
            for (index, sums) in sums.iter().enumerate().take(rows) {
                finish_row(block, row + index, first, &sums[..width]);
            }
        }
    }
}

super::simd::multiversion! {
    /// `sums[r][j] = Σ_k x[row + r, k] · panel[k, first + j]`.
    fn portable_tile_body(
        x: &[f32],
        k: usize,
        rows: usize,
        panel: &[f32],
        first: usize,
        sums: &mut [[f32; 16]; 4],
    ) {
        for depth in 0..k {
            let b = &panel[depth * PANEL + first..][..16];
            for (r, sums) in sums.iter_mut().enumerate().take(rows) {
                let a = x[r * k + depth];
                for (sum, b) in sums.iter_mut().zip(b) {
                    *sum += a * b;
                }
            }
        }
    }
}

/// # Safety
/// Rows `row..row + rows` of x and the block's panel are valid.
unsafe fn portable_tile(
    block: &Block<'_>,
    row: usize,
    rows: usize,
    first: usize,
    sums: &mut [[f32; 16]; 4],
) {
    // SAFETY: the caller's contract: `rows` rows of `k` values from row `row`, and the
    // panel's `k x 64` values.
    let (x, panel) = unsafe {
        (
            std::slice::from_raw_parts(block.x.add(row * block.k), rows * block.k),
            std::slice::from_raw_parts(block.panel, block.k * PANEL),
        )
    };
    portable_tile_body(x, block.k, rows, panel, first, sums);
}

/// Stores one row's sums and adds the bias and residual to them.
fn finish_row(block: &Block<'_>, row: usize, first: usize, sums: &[f32]) {
    let offset = row * block.n + block.first_column + first;
    // SAFETY: `sums.len()` columns of row `row` inside this block, this task's alone.
    let out = unsafe { std::slice::from_raw_parts_mut(block.out.at(offset), sums.len()) };
    out.copy_from_slice(sums);
    add_bias_and_residual(block, row, first, sums.len());
}

/// Adds the bias and residual to `width` stored values of one row from the block's
/// column `first`.
fn add_bias_and_residual(block: &Block<'_>, row: usize, first: usize, width: usize) {
    let column = block.first_column + first;
    let offset = row * block.n + column;
    // SAFETY: `width` columns of row `row` inside this block, this task's alone; the
    // residual's same positions, which no task writes.
    let (out, residual) = unsafe {
        (
            std::slice::from_raw_parts_mut(block.out.at(offset), width),
            block
                .residual
                .map(|residual| std::slice::from_raw_parts(residual.add(offset), width)),
        )
    };
    if let Some(bias) = block.bias {
        add(out, &bias[column..column + width]);
    }
    if let Some(residual) = residual {
        add(out, residual);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{Block, PANEL};
    use crate::simd::first_lanes;

    /// Rows per tile: 6 x 4 vector accumulators, plus the panel's 4 vectors and a
    /// broadcast, fit AVX-512's 32 registers.
    const ROWS: usize = 6;

    /// # Safety
    /// The CPU has AVX-512F; otherwise as `dense_panels_into`, for this block.
    pub(super) unsafe fn block(block: &Block<'_>) {
        let mut row = 0;
        while row < block.m {
            let rows = ROWS.min(block.m - row);
            // SAFETY: the caller's contract; `rows` rows from `row` are inside x and out.
            unsafe {
                match rows {
                    6 => tile::<6>(block, row),
                    5 => tile::<5>(block, row),
                    4 => tile::<4>(block, row),
                    3 => tile::<3>(block, row),
                    2 => tile::<2>(block, row),
                    _ => tile::<1>(block, row),
                }
            }
            row += rows;
        }
    }

    /// Rows `row..row + R` of the block: the k-long product, then bias and residual,
    /// stored with a mask on the last panel's missing columns.
    #[target_feature(enable = "avx512f")]
    unsafe fn tile<const R: usize>(block: &Block<'_>, row: usize) {
        let mut sums = [[_mm512_setzero_ps(); 4]; R];
        // SAFETY: x's rows `row..row + R` hold `k` values each, the panel `k x 64`, and
        // the masked loads and stores touch only the block's real columns of out, bias
        // and residual (the caller's contract).
        unsafe {
            let x = block.x.add(row * block.k);
            let mut b = block.panel;
            for depth in 0..block.k {
                let b0 = _mm512_loadu_ps(b);
                let b1 = _mm512_loadu_ps(b.add(16));
                let b2 = _mm512_loadu_ps(b.add(32));
                let b3 = _mm512_loadu_ps(b.add(48));
                for (r, sums) in sums.iter_mut().enumerate() {
                    let a = _mm512_set1_ps(*x.add(r * block.k + depth));
                    sums[0] = _mm512_fmadd_ps(a, b0, sums[0]);
                    sums[1] = _mm512_fmadd_ps(a, b1, sums[1]);
                    sums[2] = _mm512_fmadd_ps(a, b2, sums[2]);
                    sums[3] = _mm512_fmadd_ps(a, b3, sums[3]);
                }
                b = b.add(PANEL);
            }
            for (r, sums) in sums.iter().enumerate() {
                let offset = (row + r) * block.n + block.first_column;
                for (vector, &sum) in sums.iter().enumerate() {
                    let first = vector * 16;
                    if first >= block.columns {
                        break;
                    }
                    let mask = first_lanes(block.columns - first);
                    let mut value = sum;
                    if let Some(bias) = block.bias {
                        let bias = bias.as_ptr().add(block.first_column + first);
                        value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(mask, bias));
                    }
                    if let Some(residual) = block.residual {
                        let residual = residual.add(offset + first);
                        value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(mask, residual));
                    }
                    _mm512_mask_storeu_ps(block.out.at(offset + first), mask, value);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
