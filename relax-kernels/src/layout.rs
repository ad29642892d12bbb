//! Changing a tensor between NCHW (`[N, C, H, W]`) and channel-blocked (`[N, C/16, H, W,
//! 16]`) layouts: what a CNN on blocked tensors does where a layer runs NCHW (a
//! convolution over channels that are not whole blocks, a network's input and output).
//!
//! TVM's compiled transform read 16 planes at once for each blocked row it wrote, one
//! value from each, and ran at about 1 GB/s: MobileNetV2's transforms of 56x56 planes
//! took 10% of the model. Here a unit of work is one row (`W` pixels) of one block of 16
//! channels: the 16 input rows are read in order and the blocked row written in order
//! (or the reverse), a transpose of 16 x `W` values in cache. With AVX-512 each 16
//! pixels of the row are transposed in registers (16 loads, 64 shuffles, 16 stores):
//! the portable loop moved one value per load and store, at 14-17 GB/s on one core.

use super::blocked::BLOCK;
use super::parallel::{for_each_unit, Shared};
use super::simd::{multiversion, Isa};
use super::tensor::Arguments;

/// Below this many values a transform runs on the calling thread alone.
const INLINE_VALUES: usize = 64 * 1024;

/// `relax_runtime.layout_blocked(x, out)`: `x` NCHW and `out` `[N, C / 16, H, W, 16]`
/// (to blocks), or `x` blocked and `out` NCHW (back); `C` a multiple of 16.
pub(crate) fn layout_blocked(args: &Arguments<'_>) -> Result<(), String> {
    layout_blocked_with(args, Isa::best())
}

/// [`layout_blocked`], transposing in the registers of `isa` (the tests run every one
/// the CPU has; one it lacks is taken as the portable loops).
fn layout_blocked_with(args: &Arguments<'_>, isa: Isa) -> Result<(), String> {
    let isa = if isa.runs_here() { isa } else { Isa::Portable };
    args.expect_count(2)?;
    let name = args.name;
    let x = args.tensor(0, None)?;
    let out = args.output(1, None)?;
    let (nchw, blocked, to_blocks) = match (x.shape.len(), out.shape.len()) {
        (4, 5) => (x.shape, out.shape, true),
        (5, 4) => (out.shape, x.shape, false),
        _ => {
            return Err(format!(
            "{name}: x has rank {} and out rank {}: expected 4 and 5 (to blocks) or 5 and 4 (back)",
            x.shape.len(),
            out.shape.len()
        ))
        }
    };
    let fits = blocked[4] == BLOCK as i64
        && nchw[0] == blocked[0]
        && Some(nchw[1]) == blocked[1].checked_mul(BLOCK as i64)
        && nchw[2..4] == blocked[2..4];
    if !fits {
        return Err(format!(
            "{name}: shapes do not fit: an NCHW tensor {nchw:?} is blocked as [N, C / 16, H, W, 16] (C a multiple of 16), not {blocked:?}"
        ));
    }
    x.check_disjoint(&out)?;
    let dim = |index: usize| nchw[index] as usize;
    let (height, width) = (dim(2), dim(3));
    let plane = height * width;
    // One unit: row `y` of block `b` of image `n`, numbered (n, b, y).
    let units = dim(0) * (dim(1) / BLOCK) * height;
    let (x, out) = (Shared(x.data), Shared(out.data));
    for_each_unit(
        args.launch,
        units * width * BLOCK < INLINE_VALUES,
        units,
        &|unit| {
            let (plane_block, y) = (unit / height, unit % height);
            // The block's first plane (NCHW) and its blocked plane start at the same value:
            // both hold `16 * H * W` values a block.
            let first = plane_block * BLOCK * plane;
            let row = BLOCK * width;
            // SAFETY: the 16 NCHW rows `y` of this block's planes and its blocked row `y`
            // (inside the checked tensors, which do not overlap); this unit alone writes the
            // output's ones, the input is read only.
            unsafe {
                let (nchw_at, blocked_at) = (first + y * width, first + y * row);
                #[cfg(target_arch = "x86_64")]
                if isa != Isa::Portable {
                    // The same rows, and the CPU has `isa`'s instructions.
                    if to_blocks {
                        let rows =
                            std::array::from_fn(|lane| x.at(nchw_at + lane * plane).cast_const());
                        if isa == Isa::Avx512 {
                            avx512::interleave(&rows, out.at(blocked_at), width);
                        } else {
                            avx2::interleave(&rows, out.at(blocked_at), width);
                        }
                    } else {
                        let rows = std::array::from_fn(|lane| out.at(nchw_at + lane * plane));
                        if isa == Isa::Avx512 {
                            avx512::deinterleave(x.at(blocked_at).cast_const(), &rows, width);
                        } else {
                            avx2::deinterleave(x.at(blocked_at).cast_const(), &rows, width);
                        }
                    }
                    return;
                }
                #[cfg(not(target_arch = "x86_64"))]
                let _ = isa; // Only x86-64 has the others.
                if to_blocks {
                    let blocked_row = std::slice::from_raw_parts_mut(out.at(blocked_at), row);
                    let rows = std::array::from_fn(|lane| {
                        std::slice::from_raw_parts(x.at(nchw_at + lane * plane).cast_const(), width)
                    });
                    interleave(&rows, blocked_row);
                } else {
                    let blocked_row =
                        std::slice::from_raw_parts(x.at(blocked_at).cast_const(), row);
                    for lane in 0..BLOCK {
                        let nchw_row =
                            std::slice::from_raw_parts_mut(out.at(nchw_at + lane * plane), width);
                        deinterleave(blocked_row, lane, nchw_row);
                    }
                }
            }
        },
    )
}

multiversion! {
    /// `blocked[x * 16 + lane] = rows[lane][x]`.
    fn interleave(rows: &[&[f32]; BLOCK], blocked: &mut [f32]) {
        for (x, pixel) in blocked.chunks_exact_mut(BLOCK).enumerate() {
            for (value, row) in pixel.iter_mut().zip(rows) {
                *value = row[x];
            }
        }
    }
}

multiversion! {
    /// `row[x] = blocked[x * 16 + lane]`.
    fn deinterleave(blocked: &[f32], lane: usize, row: &mut [f32]) {
        for (value, pixel) in row.iter_mut().zip(blocked.chunks_exact(BLOCK)) {
            *value = pixel[lane];
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::BLOCK;

    /// Values per vector: a block's 16 lanes are two halves of 8.
    const HALF: usize = 8;

    /// The 8 x 8 transpose of `rows`: vector `i` of the result holds value `i` of each.
    #[target_feature(enable = "avx2")]
    fn transpose(rows: [__m256; HALF]) -> [__m256; HALF] {
        // Pairs of rows interleaved, then pairs of pairs, then the 128-bit halves.
        let pairs: [__m256; HALF] = std::array::from_fn(|index| {
            let (a, b) = (rows[index / 2 * 2], rows[index / 2 * 2 + 1]);
            if index % 2 == 0 {
                _mm256_unpacklo_ps(a, b)
            } else {
                _mm256_unpackhi_ps(a, b)
            }
        });
        // quads[q]: values (q % 4) and (q % 4) + 4 of rows 0-3 (q < 4) or 4-7.
        let quads: [__m256; HALF] = std::array::from_fn(|index| {
            let base = index / 4 * 4;
            let (low, high) = (
                pairs[base + (index % 4) / 2],
                pairs[base + 2 + (index % 4) / 2],
            );
            if index % 2 == 0 {
                _mm256_shuffle_ps::<0x44>(low, high)
            } else {
                _mm256_shuffle_ps::<0xEE>(low, high)
            }
        });
        std::array::from_fn(|value| {
            let (low, high) = (quads[value % 4], quads[4 + value % 4]);
            if value < 4 {
                _mm256_permute2f128_ps::<0x20>(low, high)
            } else {
                _mm256_permute2f128_ps::<0x31>(low, high)
            }
        })
    }

    /// `blocked[x * 16 + lane] = rows[lane][x]` for `x < width`, 8 pixels by 8 lanes at a
    /// time (the last 1-7 pixels one by one).
    ///
    /// # Safety
    /// The CPU has AVX2; each of `rows` is `width` readable values, `blocked` is
    /// `16 * width` writable ones, and they do not overlap.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn interleave(rows: &[*const f32; BLOCK], blocked: *mut f32, width: usize) {
        let whole = width / HALF * HALF;
        // SAFETY: pixels below `width` of each row and of `blocked` (the caller's bounds).
        unsafe {
            for first in (0..whole).step_by(HALF) {
                for half in 0..2 {
                    let pixels = transpose(std::array::from_fn(|lane| {
                        _mm256_loadu_ps(rows[half * HALF + lane].add(first))
                    }));
                    for (x, pixel) in pixels.iter().enumerate() {
                        _mm256_storeu_ps(blocked.add((first + x) * BLOCK + half * HALF), *pixel);
                    }
                }
            }
            for x in whole..width {
                for (lane, row) in rows.iter().enumerate() {
                    *blocked.add(x * BLOCK + lane) = *row.add(x);
                }
            }
        }
    }

    /// `rows[lane][x] = blocked[x * 16 + lane]` for `x < width`, 8 pixels by 8 lanes at a
    /// time (the last 1-7 pixels one by one).
    ///
    /// # Safety
    /// The CPU has AVX2; `blocked` is `16 * width` readable values, each of `rows`
    /// `width` writable ones, and they do not overlap.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn deinterleave(blocked: *const f32, rows: &[*mut f32; BLOCK], width: usize) {
        let whole = width / HALF * HALF;
        // SAFETY: pixels below `width` of `blocked` and of each row (the caller's bounds).
        unsafe {
            for first in (0..whole).step_by(HALF) {
                for half in 0..2 {
                    let lanes = transpose(std::array::from_fn(|x| {
                        _mm256_loadu_ps(blocked.add((first + x) * BLOCK + half * HALF))
                    }));
                    for (lane, values) in lanes.iter().enumerate() {
                        _mm256_storeu_ps(rows[half * HALF + lane].add(first), *values);
                    }
                }
            }
            for x in whole..width {
                for (lane, row) in rows.iter().enumerate() {
                    *row.add(x) = *blocked.add(x * BLOCK + lane);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::BLOCK;
    use crate::simd::first_lanes;

    /// The 16 rows of `rows` (16 lanes of 16 values) transposed: lane `i` of row `j` to
    /// lane `j` of row `i`. Unpacking pairs of rows interleaves their values, pairs of
    /// those their pairs, and the 128-bit shuffles then gather the quarters: 64 shuffles.
    #[target_feature(enable = "avx512f")]
    fn transpose(rows: [__m512; BLOCK]) -> [__m512; BLOCK] {
        // [a0 b0 a1 b1 | a4 b4 a5 b5 | ...] and [a2 b2 a3 b3 | ...] from rows a, b.
        let pairs: [__m512; BLOCK] = std::array::from_fn(|i| {
            let (a, b) = (rows[i & !1], rows[i | 1]);
            if i % 2 == 0 {
                _mm512_unpacklo_ps(a, b)
            } else {
                _mm512_unpackhi_ps(a, b)
            }
        });
        // [a0 b0 c0 d0 | a4 b4 c4 d4 | ...] and so on, from pairs of pairs.
        let quads: [__m512; BLOCK] = std::array::from_fn(|i| {
            let group = i & !3;
            let (a, b) = (
                _mm512_castps_pd(pairs[group + i / 2 % 2]),
                _mm512_castps_pd(pairs[group + 2 + i / 2 % 2]),
            );
            _mm512_castpd_ps(if i % 2 == 0 {
                _mm512_unpacklo_pd(a, b)
            } else {
                _mm512_unpackhi_pd(a, b)
            })
        });
        // Quarters 0 and 2 (0x88) or 1 and 3 (0xDD) of two groups of 4 rows.
        let halves: [__m512; BLOCK] = std::array::from_fn(|i| {
            let (a, b) = (quads[i % 4 + i / 8 * 8], quads[i % 4 + i / 8 * 8 + 4]);
            if i / 4 % 2 == 0 {
                _mm512_shuffle_f32x4::<0x88>(a, b)
            } else {
                _mm512_shuffle_f32x4::<0xDD>(a, b)
            }
        });
        std::array::from_fn(|i| {
            let (a, b) = (halves[i % 8], halves[i % 8 + 8]);
            if i < 8 {
                _mm512_shuffle_f32x4::<0x88>(a, b)
            } else {
                _mm512_shuffle_f32x4::<0xDD>(a, b)
            }
        })
    }

    /// `blocked[x * 16 + lane] = rows[lane][x]` for `x < width`, 16 pixels at a time.
    ///
    /// # Safety
    /// The CPU has AVX-512F; each of `rows` is `width` readable values, `blocked` is
    /// `16 * width` writable ones, and they do not overlap.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn interleave(rows: &[*const f32; BLOCK], blocked: *mut f32, width: usize) {
        for first in (0..width).step_by(BLOCK) {
            let count = (width - first).min(BLOCK);
            let mask = first_lanes(count);
            // SAFETY: lanes `first..first + count` of each row, pixels of the same in
            // `blocked` (the caller's bounds).
            unsafe {
                let pixels = transpose(std::array::from_fn(|lane| {
                    _mm512_maskz_loadu_ps(mask, rows[lane].add(first))
                }));
                for (x, pixel) in pixels.iter().take(count).enumerate() {
                    _mm512_storeu_ps(blocked.add((first + x) * BLOCK), *pixel);
                }
            }
        }
    }

    /// `rows[lane][x] = blocked[x * 16 + lane]` for `x < width`, 16 pixels at a time.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `blocked` is `16 * width` readable values, each of `rows`
    /// `width` writable ones, and they do not overlap.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn deinterleave(blocked: *const f32, rows: &[*mut f32; BLOCK], width: usize) {
        for first in (0..width).step_by(BLOCK) {
            let count = (width - first).min(BLOCK);
            let mask = first_lanes(count);
            // SAFETY: pixels `first..first + count` of `blocked`, the same lanes of each
            // row (the caller's bounds); the pixels past `count` are zeros, not loaded.
            unsafe {
                let lanes = transpose(std::array::from_fn(|x| {
                    if x < count {
                        _mm512_loadu_ps(blocked.add((first + x) * BLOCK))
                    } else {
                        _mm512_setzero_ps()
                    }
                }));
                for (lane, values) in lanes.iter().enumerate() {
                    _mm512_mask_storeu_ps(rows[lane].add(first), mask, *values);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
