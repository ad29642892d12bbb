//! A convolution's matrix product `out[f, p] = Σ_k w[f, k] · x[k, p]` with `x` read
//! where it lies: a 1x1 convolution's input planes, a block of unfolded patches, or
//! Winograd's transformed tiles.
//!
//! The gemm crate packs both operands on every call: for a convolution, a copy of the
//! whole input (megabytes on 56x56 planes) for products of a few dozen multiply-adds per
//! value. Here nothing is packed: AVX-512 tiles of 6 filters x 64 pixels broadcast the
//! weights where they lie (OIHW is `[filters, depth]` already) and load the pixels from
//! `x`'s rows, 64 at a time (a strip); the strip's rows stay in L2 while every filter's
//! tile reads them. Each tile's sums get the per-filter scale and shift, the residual
//! and a ReLU in registers as they are stored; what registers cannot do (a GELU) the
//! caller applies to the stored rows while they are in L1.

use std::ops::Range;

use super::parallel::Shared;

/// Pixels per strip: 4 vectors of 16.
#[cfg(target_arch = "x86_64")]
const STRIP: usize = 64;

/// Filters per tile: 6 x 4 vector accumulators, 4 pixel vectors and a broadcast fit
/// AVX-512's 32 registers.
#[cfg(target_arch = "x86_64")]
const FILTERS_PER_TILE: usize = 6;

/// One product's operands.
#[derive(Clone, Copy)]
// Read by the AVX-512 tiles alone (x86_64).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct Product {
    /// Values summed per output (`k`).
    pub(crate) depth: usize,
    /// Weight `(f, k)` is `w[f * w_filter_stride + k * w_depth_stride]` (OIHW: `depth`
    /// and 1; a Winograd transform `[channels, filters]`: 1 and `filters`).
    pub(crate) w: *const f32,
    pub(crate) w_filter_stride: usize,
    pub(crate) w_depth_stride: usize,
    /// `depth` rows, `x_stride` apart; column `c` of the product reads `x[k * x_stride + c]`.
    pub(crate) x: *const f32,
    pub(crate) x_stride: usize,
    /// Filter `f`'s output row starts at `out + f * out_stride`; column `c` is its `c`-th.
    pub(crate) out: Shared,
    pub(crate) out_stride: usize,
}

/// What the tiles do to their sums before storing them, in registers:
/// `sum * scale[f] + shift[f] + residual`, then a clamp (ReLU, ReLU6; each part optional).
#[derive(Clone, Copy, Default)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct InRegisters<'a> {
    /// One value per filter of the product (filter `f` reads `scale[f]`).
    pub(crate) scale: Option<&'a [f32]>,
    pub(crate) shift: Option<&'a [f32]>,
    /// Laid out as `out` (value `(f, c)` at `residual + f * out_stride + c`); read only.
    pub(crate) residual: Option<Shared>,
    /// `min(max(value, low), high)`.
    pub(crate) clamp: Option<(f32, f32)>,
}

/// What a caller applies to each stored tile row: `then(filter, columns, values)`.
pub(crate) type Then<'a> = Option<&'a (dyn Fn(usize, Range<usize>, &mut [f32]) + Sync)>;

/// Computes the output block `filters` x `columns` on this thread, strip by strip,
/// applying `finish` to each tile in registers, then `then(filter, columns, values)`
/// (when given) to each stored tile row while it is in L1 (`values` is that row's run of
/// `out`): for what `finish` cannot do in registers.
///
/// # Safety
/// The CPU has AVX-512F; `w` holds the weights of `filters`, `x` the `depth` rows of
/// `columns`, `out` (and `finish.residual`) the block, `finish.scale` and `.shift` a
/// value per filter, all valid for the call; the block is written by no other thread
/// meanwhile and overlaps no operand.
pub(crate) unsafe fn multiply_strips(
    product: &Product,
    filters: Range<usize>,
    columns: Range<usize>,
    finish: &InRegisters<'_>,
    then: Then<'_>,
) {
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (product, filters, columns, finish, then);
        unreachable!("strips need AVX-512: callers check `avx512_available` first");
    }
    #[cfg(target_arch = "x86_64")]
    {
        let mut column = columns.start;
        while column < columns.end {
            let width = STRIP.min(columns.end - column);
            let mut filter = filters.start;
            while filter < filters.end {
                let rows = FILTERS_PER_TILE.min(filters.end - filter);
                let tile = avx512::Tile {
                    filter,
                    rows,
                    column,
                    width,
                };
                // SAFETY: the caller's contract; the tile lies inside the block.
                unsafe { avx512::tile(product, &tile, finish) };
                if let Some(then) = then {
                    for row in filter..filter + rows {
                        // SAFETY: the run this tile just stored, this thread's alone.
                        let values = unsafe {
                            std::slice::from_raw_parts_mut(
                                product.out.at(row * product.out_stride + column),
                                width,
                            )
                        };
                        then(row, column..column + width, values);
                    }
                }
                filter += rows;
            }
            column += width;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{InRegisters, Product};
    use crate::simd::first_lanes;

    /// `rows` (1 to 6) filters from `filter` by `width` (1 to 64) columns from `column`.
    pub(super) struct Tile {
        pub(super) filter: usize,
        pub(super) rows: usize,
        pub(super) column: usize,
        pub(super) width: usize,
    }

    /// Computes `tile`, finishes it and stores it in `out`.
    ///
    /// # Safety
    /// As `multiply_strips`, for this tile.
    pub(super) unsafe fn tile(product: &Product, tile: &Tile, finish: &InRegisters<'_>) {
        macro_rules! vectors {
            ($rows:literal) => {
                match tile.width.div_ceil(16) {
                    4 => sums::<$rows, 4>(product, tile, finish),
                    3 => sums::<$rows, 3>(product, tile, finish),
                    2 => sums::<$rows, 2>(product, tile, finish),
                    _ => sums::<$rows, 1>(product, tile, finish),
                }
            };
        }
        // SAFETY: the caller's contract.
        unsafe {
            match tile.rows {
                6 => vectors!(6),
                5 => vectors!(5),
                4 => vectors!(4),
                3 => vectors!(3),
                2 => vectors!(2),
                _ => vectors!(1),
            }
        }
    }

    /// `R` filters x `V` vectors of pixels (the last one masked to the tile's width).
    #[target_feature(enable = "avx512f")]
    unsafe fn sums<const R: usize, const V: usize>(
        product: &Product,
        tile: &Tile,
        finish: &InRegisters<'_>,
    ) {
        let masks: [__mmask16; V] =
            std::array::from_fn(|vector| first_lanes(tile.width - vector * 16));
        // SAFETY: the caller's contract.
        unsafe {
            let sums = accumulate::<R, V>(product, tile, &masks);
            store(product, tile, finish, &masks, &sums);
        }
    }

    /// The tile's sums. A function of its own, so that the accumulators stay in
    /// registers: in one function with [`store`]'s loops, LLVM kept them in memory.
    ///
    /// # Safety
    /// As `multiply_strips`, for this tile: w holds the `depth` weights of its filters,
    /// and the masked loads read only `x`'s columns of the tile.
    #[target_feature(enable = "avx512f")]
    #[inline(never)]
    unsafe fn accumulate<const R: usize, const V: usize>(
        product: &Product,
        tile: &Tile,
        masks: &[__mmask16; V],
    ) -> [[__m512; V]; R] {
        let mut sums = [[_mm512_setzero_ps(); V]; R];
        // SAFETY: the function's contract.
        unsafe {
            let (filter_stride, depth_stride) = (product.w_filter_stride, product.w_depth_stride);
            let mut w = product.w.add(tile.filter * filter_stride);
            let mut x = product.x.add(tile.column);
            for _ in 0..product.depth {
                let b: [__m512; V] = std::array::from_fn(|vector| {
                    _mm512_maskz_loadu_ps(masks[vector], x.add(vector * 16))
                });
                for (r, sums) in sums.iter_mut().enumerate() {
                    let a = _mm512_set1_ps(*w.add(r * filter_stride));
                    for (sum, b) in sums.iter_mut().zip(&b) {
                        *sum = _mm512_fmadd_ps(a, *b, *sum);
                    }
                }
                x = x.add(product.x_stride);
                w = w.add(depth_stride);
            }
        }
        sums
    }

    /// `finish` on the tile's sums, stored in `out`.
    ///
    /// # Safety
    /// As `multiply_strips`, for this tile: the masked loads and stores touch only the
    /// tile's columns of the residual and `out`.
    #[target_feature(enable = "avx512f")]
    unsafe fn store<const R: usize, const V: usize>(
        product: &Product,
        tile: &Tile,
        finish: &InRegisters<'_>,
        masks: &[__mmask16; V],
        sums: &[[__m512; V]; R],
    ) {
        for (r, sums) in sums.iter().enumerate() {
            let row = tile.filter + r;
            let offset = row * product.out_stride + tile.column;
            let per_filter =
                |values: Option<&[f32]>| values.map(|values| _mm512_set1_ps(values[row]));
            let (scale, shift) = (per_filter(finish.scale), per_filter(finish.shift));
            for (vector, &sum) in sums.iter().enumerate() {
                let mut value = sum;
                if let Some(scale) = scale {
                    value = _mm512_mul_ps(value, scale);
                }
                if let Some(shift) = shift {
                    value = _mm512_add_ps(value, shift);
                }
                // SAFETY: the function's contract.
                unsafe {
                    if let Some(residual) = finish.residual {
                        let residual = residual.at(offset + vector * 16);
                        value =
                            _mm512_add_ps(value, _mm512_maskz_loadu_ps(masks[vector], residual));
                    }
                    if let Some((low, high)) = finish.clamp {
                        value = _mm512_min_ps(
                            _mm512_max_ps(value, _mm512_set1_ps(low)),
                            _mm512_set1_ps(high),
                        );
                    }
                    _mm512_mask_storeu_ps(
                        product.out.at(offset + vector * 16),
                        masks[vector],
                        value,
                    );
                }
            }
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::parallel::test_values;
    use crate::simd::avx512_available;

    /// Every tile shape (1-6 filters, 1-64 columns in the last strip), over rows wider
    /// than the block, with weights as OIHW rows and as a `[depth, filters]` transform,
    /// against a naive product: once with the scale, shift, residual and ReLU6 in
    /// registers, once with none of them and `then` adding 1 (which sees each stored row
    /// once, with its columns). Nothing outside the block is written.
    #[test]
    fn strips_match_a_naive_product_for_every_tile_shape() {
        if !avx512_available() {
            // Callers use the gemm crate instead; nothing of this module runs.
            return;
        }
        for (filters, columns, depth) in [(13, 150, 7), (6, 64, 33), (1, 1, 1), (17, 200, 70)] {
            for (transposed, in_registers) in [(false, false), (false, true), (true, true)] {
                let (x_stride, out_stride) = (columns + 5, columns + 3);
                let w = test_values(filters * depth, 1, 1.0);
                let x = test_values(depth * x_stride, 2, 1.0);
                let scale = test_values(filters, 3, 2.0);
                let shift = test_values(filters, 4, 1.0);
                let residual = test_values(filters * out_stride, 5, 1.0);
                let mut out = vec![f32::NAN; filters * out_stride];
                let (w_filter_stride, w_depth_stride) =
                    if transposed { (1, filters) } else { (depth, 1) };
                let weight = |f: usize, k: usize| w[f * w_filter_stride + k * w_depth_stride];
                let product = Product {
                    depth,
                    w: w.as_ptr(),
                    w_filter_stride,
                    w_depth_stride,
                    x: x.as_ptr(),
                    x_stride,
                    out: Shared(out.as_mut_ptr()),
                    out_stride,
                };
                let finish = if in_registers {
                    InRegisters {
                        scale: Some(&scale),
                        shift: Some(&shift),
                        residual: Some(Shared(residual.as_ptr().cast_mut())),
                        clamp: Some((0.0, 6.0)),
                    }
                } else {
                    InRegisters::default()
                };
                let seen = std::sync::Mutex::new(vec![0usize; filters]);
                let add_one = |filter: usize, range: Range<usize>, values: &mut [f32]| {
                    assert_eq!(values.len(), range.len());
                    seen.lock().unwrap()[filter] += range.len();
                    values.iter_mut().for_each(|value| *value += 1.0);
                };
                let start = 2.min(columns - 1);
                let then: Then<'_> = (!in_registers).then_some(&add_one);
                // SAFETY: the buffers above hold every row and column addressed.
                unsafe { multiply_strips(&product, 0..filters, start..columns, &finish, then) };
                let seen = seen.into_inner().unwrap();
                let expected_seen = if in_registers { 0 } else { columns - start };
                assert_eq!(seen, vec![expected_seen; filters]);
                for f in 0..filters {
                    for c in 0..out_stride {
                        let got = out[f * out_stride + c];
                        let case = format!("{filters}x{columns}x{depth} transposed {transposed} in registers {in_registers} ({f}, {c})");
                        if c < start || c >= columns {
                            assert!(got.is_nan(), "{case}: outside the block, written");
                            continue;
                        }
                        let sum: f32 = (0..depth).map(|k| weight(f, k) * x[k * x_stride + c]).sum();
                        let want = if in_registers {
                            (sum * scale[f] + shift[f] + residual[f * out_stride + c])
                                .clamp(0.0, 6.0)
                        } else {
                            sum + 1.0
                        };
                        assert!(
                            (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "{case}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
