//! A convolution's matrix product `out[f, p] = Σ_k w[f, k] · x[k, p]` with the filters
//! along the vector lanes, for convolutions with few output pixels per image.
//!
//! [`strips`](super::strips) puts the pixels along the lanes, 64 at a time: a 7x7 output
//! plane (49 pixels) fills 49 of its 64 lanes. Here the kernel is packed at load into
//! filter panels, `[ceil(filters / 64), depth, 64]` (zero-padded, as the dense kernel's
//! [`panels`](super::panels)), and a tile of 64 filters x up to 6 pixels broadcasts each
//! pixel's value: every lane does useful work whatever the plane's size. Measured on one
//! thread against strips, at 49 pixels: 0.82-0.86 of the time with weights in cache,
//! 0.89-0.97 for 512 x 2048 weights.

use super::panels::PANEL;
use super::parallel::Shared;
use super::simd::Isa;

/// One product's operands.
#[derive(Clone, Copy)]
pub(crate) struct Operands {
    /// Values summed per output (`k`).
    pub(crate) depth: usize,
    /// The filter panels: weight `(f, k)` is `panels[((f / 64) * depth + k) * 64 + f % 64]`.
    pub(crate) panels: *const f32,
    /// `depth` rows, `x_stride` apart; pixel `p` of row `k` is `x[k * x_stride + p]`.
    pub(crate) x: *const f32,
    pub(crate) x_stride: usize,
    /// Filter `f`'s output row starts at `out + f * out_stride`.
    pub(crate) out: Shared,
    pub(crate) out_stride: usize,
}

/// Pixels per tile: 6 x 4 vector accumulators, the panel's 4 vectors and a broadcast fit
/// AVX-512's 32 registers.
pub(crate) const PIXELS_PER_TILE: usize = 6;

/// Computes the sums of panel `panel`'s filters (`filters` of them, from `panel * 64`:
/// 64 but for the last panel) for `pixels`, stored unfinished in `out`.
///
/// # Safety
/// `isa` one this CPU runs ([`Isa::runs_here`]); `panels` holds panel `panel`'s
/// `depth x 64` values, `x` the `depth` rows of `pixels`, `out` the panel's filter rows over
/// `pixels`, all valid for the call; those outputs are written by no other thread
/// meanwhile and overlap no operand.
pub(crate) unsafe fn multiply_panel(
    operands: &Operands,
    panel: usize,
    filters: usize,
    pixels: std::ops::Range<usize>,
    isa: Isa,
) {
    let mut pixel = pixels.start;
    while pixel < pixels.end {
        let count = PIXELS_PER_TILE.min(pixels.end - pixel);
        let tile = Tile {
            panel,
            filters,
            pixel,
            count,
        };
        // SAFETY: the caller's contract; the tile lies inside the block.
        unsafe {
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => avx512::tile(operands, &tile),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => avx2::tile(operands, &tile),
                _ => portable_tile(operands, &tile),
            }
        }
        pixel += count;
    }
}

/// `count` (1 to 6) pixels from `pixel` by panel `panel`'s `filters` (1 to 64) filters.
struct Tile {
    panel: usize,
    filters: usize,
    pixel: usize,
    count: usize,
}

/// Stores a tile's sums (`sums[p][f]`, for pixel `tile.pixel + p` and the panel's filter
/// `f`) in `out`, where each filter's pixels are a row: a transpose.
///
/// # Safety
/// As [`multiply_panel`], for this tile.
unsafe fn store_transposed(operands: &Operands, tile: &Tile, sums: &[[f32; PANEL]]) {
    let first_filter = tile.panel * PANEL;
    for filter in 0..tile.filters {
        // SAFETY: the tile's pixels of one of its filters' rows (the caller's contract).
        let row = unsafe {
            std::slice::from_raw_parts_mut(
                operands
                    .out
                    .at((first_filter + filter) * operands.out_stride + tile.pixel),
                tile.count,
            )
        };
        for (slot, sums) in row.iter_mut().zip(sums) {
            *slot = sums[filter];
        }
    }
}

/// Filters and pixels per portable block: 4 x 16 sums fit the vector registers of AVX2
/// (8 of 16) and NEON (16 of 32).
const PORTABLE_FILTERS: usize = 16;
const PORTABLE_PIXELS: usize = 4;

super::simd::multiversion! {
    /// `sums[p][f] = Σ_k x[k * x_stride + p] · panel[k * 64 + first + f]` for `count`
    /// pixels and 16 filters from the panel's `first`.
    fn portable_sums(
        x: &[f32],
        x_stride: usize,
        depth: usize,
        count: usize,
        panel: &[f32],
        first: usize,
        sums: &mut [[f32; PORTABLE_FILTERS]; PORTABLE_PIXELS],
    ) {
        for k in 0..depth {
            let weights: &[f32; PORTABLE_FILTERS] =
                panel[k * PANEL + first..][..PORTABLE_FILTERS].try_into().expect("16 weights");
            let values = &x[k * x_stride..][..count];
            for (sums, &value) in sums.iter_mut().zip(values) {
                for (sum, weight) in sums.iter_mut().zip(weights) {
                    *sum += value * weight;
                }
            }
        }
    }
}

/// A tile on any CPU, in blocks of 16 filters x 4 pixels: the loops above, which the
/// compiler vectorizes along the filters.
///
/// # Safety
/// As [`multiply_panel`], for this tile.
unsafe fn portable_tile(operands: &Operands, tile: &Tile) {
    let depth = operands.depth;
    let mut values = [[0.0; PANEL]; PIXELS_PER_TILE];
    if depth == 0 {
        // Sums of nothing (no input channels): x has no rows to read.
        // SAFETY: the caller's contract.
        unsafe { store_transposed(operands, tile, &values[..tile.count]) };
        return;
    }
    // SAFETY: the caller's contract: the panel's `depth x 64` values and `depth` rows of
    // x reaching the tile's last pixel.
    let (panel, x) = unsafe {
        (
            std::slice::from_raw_parts(
                operands.panels.add(tile.panel * depth * PANEL),
                depth * PANEL,
            ),
            std::slice::from_raw_parts(
                operands.x.add(tile.pixel),
                (depth - 1) * operands.x_stride + tile.count,
            ),
        )
    };
    for first_pixel in (0..tile.count).step_by(PORTABLE_PIXELS) {
        let count = PORTABLE_PIXELS.min(tile.count - first_pixel);
        let x = &x[first_pixel..];
        for first in (0..tile.filters).step_by(PORTABLE_FILTERS) {
            let mut sums = [[0.0; PORTABLE_FILTERS]; PORTABLE_PIXELS];
            portable_sums(x, operands.x_stride, depth, count, panel, first, &mut sums);
            for (values, sums) in values[first_pixel..].iter_mut().zip(&sums[..count]) {
                values[first..first + PORTABLE_FILTERS].copy_from_slice(sums);
            }
        }
    }
    // SAFETY: the caller's contract.
    unsafe { store_transposed(operands, tile, &values[..tile.count]) };
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{store_transposed, Operands, Tile, PANEL};

    /// Filters summed together: 2 vectors, so that 6 pixels are 12 accumulators beside
    /// the 2 weight vectors and a broadcast (AVX2 has 16 registers).
    const FILTERS: usize = 16;

    /// # Safety
    /// The CPU has AVX2 and FMA; otherwise as `multiply_panel`, for this tile.
    pub(super) unsafe fn tile(operands: &Operands, tile: &Tile) {
        // SAFETY: the caller's contract.
        unsafe {
            match tile.count {
                6 => sums::<6>(operands, tile),
                5 => sums::<5>(operands, tile),
                4 => sums::<4>(operands, tile),
                3 => sums::<3>(operands, tile),
                2 => sums::<2>(operands, tile),
                _ => sums::<1>(operands, tile),
            }
        }
    }

    /// `P` pixels x the panel's filters, 16 at a time, stored through a transpose in L1.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn sums<const P: usize>(operands: &Operands, tile: &Tile) {
        let mut values = [[0.0; PANEL]; P];
        for first in (0..tile.filters).step_by(FILTERS) {
            // SAFETY: the function's contract.
            let sums = unsafe { accumulate::<P>(operands, tile, first) };
            for (values, sums) in values.iter_mut().zip(&sums) {
                for (half, &sum) in sums.iter().enumerate() {
                    // SAFETY: 8 of the row's 64 values (`first` is below 64, by 16s).
                    unsafe { _mm256_storeu_ps(values.as_mut_ptr().add(first + half * 8), sum) };
                }
            }
        }
        // SAFETY: the function's contract.
        unsafe { store_transposed(operands, tile, &values) };
    }

    /// The tile's sums of the panel's filters `first..first + 16`. A function of its own,
    /// so that the accumulators stay in registers.
    ///
    /// # Safety
    /// As `multiply_panel`, for this tile: the panel holds `depth x 64` values (zero
    /// past its real filters), x's rows reach the tile's last pixel.
    #[target_feature(enable = "avx2,fma")]
    #[inline(never)]
    unsafe fn accumulate<const P: usize>(
        operands: &Operands,
        tile: &Tile,
        first: usize,
    ) -> [[__m256; 2]; P] {
        let mut sums = [[_mm256_setzero_ps(); 2]; P];
        // SAFETY: the function's contract.
        unsafe {
            let mut w = operands
                .panels
                .add(tile.panel * operands.depth * PANEL + first);
            let mut x = operands.x.add(tile.pixel);
            for _ in 0..operands.depth {
                let (low, high) = (_mm256_loadu_ps(w), _mm256_loadu_ps(w.add(8)));
                for (pixel, sums) in sums.iter_mut().enumerate() {
                    let a = _mm256_broadcast_ss(&*x.add(pixel));
                    sums[0] = _mm256_fmadd_ps(a, low, sums[0]);
                    sums[1] = _mm256_fmadd_ps(a, high, sums[1]);
                }
                x = x.add(operands.x_stride);
                w = w.add(PANEL);
            }
        }
        sums
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{store_transposed, Operands, Tile, PANEL};

    /// # Safety
    /// The CPU has AVX-512F; otherwise as `multiply_panel`, for this tile.
    pub(super) unsafe fn tile(operands: &Operands, tile: &Tile) {
        // SAFETY: the caller's contract.
        unsafe {
            match tile.count {
                6 => sums::<6>(operands, tile),
                5 => sums::<5>(operands, tile),
                4 => sums::<4>(operands, tile),
                3 => sums::<3>(operands, tile),
                2 => sums::<2>(operands, tile),
                _ => sums::<1>(operands, tile),
            }
        }
    }

    /// `P` pixels x the panel's 64 filters, stored through a transpose in L1.
    #[target_feature(enable = "avx512f")]
    unsafe fn sums<const P: usize>(operands: &Operands, tile: &Tile) {
        // SAFETY: the function's contract.
        let sums = unsafe { accumulate::<P>(operands, tile) };
        let mut values = [[0.0; PANEL]; P];
        for (values, sums) in values.iter_mut().zip(&sums) {
            for (vector, &sum) in sums.iter().enumerate() {
                // SAFETY: 16 of the row's 64 values.
                unsafe { _mm512_storeu_ps(values.as_mut_ptr().add(vector * 16), sum) };
            }
        }
        // SAFETY: the function's contract.
        unsafe { store_transposed(operands, tile, &values) };
    }

    /// The tile's sums. A function of its own, so that the accumulators stay in
    /// registers (as in `strips`).
    ///
    /// # Safety
    /// As `multiply_panel`, for this tile: the panel holds `depth x 64` values (zero
    /// past its real filters), x's rows reach the tile's last pixel.
    #[target_feature(enable = "avx512f")]
    #[inline(never)]
    unsafe fn accumulate<const P: usize>(operands: &Operands, tile: &Tile) -> [[__m512; 4]; P] {
        let mut sums = [[_mm512_setzero_ps(); 4]; P];
        // SAFETY: the function's contract.
        unsafe {
            let mut w = operands.panels.add(tile.panel * operands.depth * PANEL);
            let mut x = operands.x.add(tile.pixel);
            for _ in 0..operands.depth {
                let b: [__m512; 4] =
                    std::array::from_fn(|vector| _mm512_loadu_ps(w.add(vector * 16)));
                for (pixel, sums) in sums.iter_mut().enumerate() {
                    let a = _mm512_set1_ps(*x.add(pixel));
                    for (sum, b) in sums.iter_mut().zip(&b) {
                        *sum = _mm512_fmadd_ps(a, *b, *sum);
                    }
                }
                x = x.add(operands.x_stride);
                w = w.add(PANEL);
            }
        }
        sums
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::panels::pack;
    use crate::parallel::test_values;

    /// Every tile width (1-6 pixels, and the last panel's 1-63 filters), on both paths,
    /// against a naive product over rows wider than the block; nothing outside the
    /// block is written.
    #[test]
    fn panels_match_a_naive_product() {
        for isa in Isa::available() {
            // (Depth 0: a convolution of no input channels, all sums 0.)
            for (filters, pixels, depth) in [
                (130, 49, 37),
                (64, 7, 1),
                (1, 1, 5),
                (70, 13, 64),
                (5, 3, 0),
            ] {
                let (x_stride, out_stride) = (pixels + 5, pixels + 3);
                let w = test_values(filters * depth, 1, 1.0);
                let x = test_values(depth * x_stride, 2, 1.0);
                let panels = pack(depth, filters, |k, f| w[f * depth + k]);
                let mut out = vec![f32::NAN; filters * out_stride];
                let operands = Operands {
                    depth,
                    panels: panels.as_ptr(),
                    x: x.as_ptr(),
                    x_stride,
                    out: Shared(out.as_mut_ptr()),
                    out_stride,
                };
                let start = 1.min(pixels - 1);
                for panel in 0..filters.div_ceil(PANEL) {
                    let count = PANEL.min(filters - panel * PANEL);
                    // SAFETY: the buffers above hold every row and pixel addressed, and
                    // `isa` is available.
                    unsafe { multiply_panel(&operands, panel, count, start..pixels, isa) };
                }
                for f in 0..filters {
                    for p in 0..out_stride {
                        let got = out[f * out_stride + p];
                        let case = format!("{filters}x{pixels}x{depth} {isa:?} ({f}, {p})");
                        if p < start || p >= pixels {
                            assert!(got.is_nan(), "{case}: outside the block, written");
                            continue;
                        }
                        let want: f32 = (0..depth)
                            .map(|k| w[f * depth + k] * x[k * x_stride + p])
                            .sum();
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
