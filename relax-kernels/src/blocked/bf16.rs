//! Blocked convolutions in bf16 with float32 sums (a model declared with `precision =
//! "bf16"`): the same segments, passes and tiles as the float32 kernel, on other operands.
//! The input is rounded to bf16 into the padded buffer, each pixel's 16 channels of a
//! block as 8 words of pairs (channels `2j` and `2j + 1`, low half first); the weights
//! are filter panels of pairs, `[ceil(F / 64), C / 2, kh, kw, 64]` words, rounded at load
//! ([`pack`]). A tile step broadcasts one word of a pixel against a panel's 4 vectors of
//! pairs with AVX512-BF16's `vdpbf16ps` (two products per lane, twice an FMA's), or, on
//! any other CPU, computes what the instruction does (see `bf16_panels`).

use super::{portable_start, portable_store, Conv2d, Finish, Shared, Tile, BLOCK, PANEL};
use crate::bf16_panels::{dot_pair, round, round_into, Bf16Isa};

/// The words of one pixel's block of channels.
const PAIRS: usize = BLOCK / 2;

/// Output pixels per AMX tile: a tile register's rows.
pub(super) const AMX_PIXELS: usize = 16;

/// An OIHW kernel of `filters x channels x kh x kw` values packed in filter panels of
/// bf16 pairs, `[ceil(filters / 64), ceil(channels / 2), kh, kw, 64]` words (as float32
/// bit patterns; zero past the last filter and channel).
pub fn pack(filters: usize, channels: usize, (kh, kw): (usize, usize), oihw: &[f32]) -> Vec<f32> {
    let taps = kh * kw;
    assert_eq!(oihw.len(), filters * channels * taps, "an OIHW kernel");
    let (panels, pairs) = (filters.div_ceil(PANEL), channels.div_ceil(2));
    let at = |filter: usize, channel: usize, tap: usize| {
        if channel < channels {
            round(oihw[(filter * channels + channel) * taps + tap])
        } else {
            0
        }
    };
    let mut out = vec![0.0; panels * pairs * taps * PANEL];
    for panel in 0..panels {
        for pair in 0..pairs {
            for tap in 0..taps {
                let run = &mut out[((panel * pairs + pair) * taps + tap) * PANEL..][..PANEL];
                for (lane, slot) in run.iter_mut().enumerate() {
                    let filter = panel * PANEL + lane;
                    if filter < filters {
                        let (low, high) =
                            (at(filter, 2 * pair, tap), at(filter, 2 * pair + 1, tap));
                        *slot = f32::from_bits(u32::from(low) | (u32::from(high) << 16));
                    }
                }
            }
        }
    }
    out
}

/// [`super::pad_rows`] in bf16: rows `rows` of block `block` of a blocked image, rounded
/// into the zero-padded buffer of words (`height x width` padded pixels of 8 words).
///
/// # Safety
/// As [`super::pad_rows`], with a blocked `x`; `isa` runs on this CPU.
pub(super) unsafe fn pad_rows(
    shape: &Conv2d,
    x: Shared,
    (block, rows): (usize, std::ops::Range<usize>),
    buffer: Shared,
    (height, width): (usize, usize),
    isa: Bf16Isa,
) {
    let (top, left, _, _) = shape.padding;
    let row_len = width * PAIRS;
    // SAFETY: these rows of block `block` of the buffer, this task's alone; a float32 and
    // a u32 have one size and alignment, and any bits are a valid u32.
    let padded = unsafe {
        std::slice::from_raw_parts_mut(
            buffer
                .at((block * height + rows.start) * row_len)
                .cast::<u32>(),
            rows.len() * row_len,
        )
    };
    let plane = shape.height * shape.width;
    for (y, row) in rows.zip(padded.chunks_exact_mut(row_len)) {
        if y < top || y - top >= shape.height {
            row.fill(0);
            continue;
        }
        row[..left * PAIRS].fill(0);
        row[(left + shape.width) * PAIRS..].fill(0);
        let start = (block * plane + (y - top) * shape.width) * BLOCK;
        // SAFETY: the source row of this block, inside the image (the contract).
        let source =
            unsafe { std::slice::from_raw_parts(x.at(start).cast_const(), shape.width * BLOCK) };
        // SAFETY: `isa` runs here (the contract).
        unsafe {
            round_into(
                source,
                &mut row[left * PAIRS..(left + shape.width) * PAIRS],
                isa,
            )
        };
    }
}

/// Computes `tile` (its input and weights in pairs) with `finish` on its last pass.
///
/// # Safety
/// As the float32 tiles; `isa` runs on this CPU.
pub(super) unsafe fn tile(tile: &Tile<'_>, finish: Option<&Finish<'_>>, isa: Bf16Isa) {
    // SAFETY: the caller's contract.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Bf16Isa::Avx512Bf16 => avx512::tile(tile, finish),
            #[cfg(target_arch = "x86_64")]
            Bf16Isa::Amx => amx::tile(tile, finish),
            _ => portable_tile(tile, finish),
        }
    }
}

/// The pairs of a tile's block `block` (8 but for a partial last block).
fn pairs_of(tile: &Tile<'_>, block: usize) -> usize {
    (tile.channels - block * BLOCK).min(BLOCK).div_ceil(2)
}

/// The tile on any CPU: per accumulator, the instruction's sums in the same order.
///
/// # Safety
/// As [`tile`].
unsafe fn portable_tile(tile: &Tile<'_>, finish: Option<&Finish<'_>>) {
    let width = tile.vectors * BLOCK;
    // SAFETY: the caller's contract.
    let mut sums = unsafe { portable_start(tile) };
    let (x, w) = (tile.x.cast::<u32>(), tile.w.cast::<u32>());
    for block in 0..tile.blocks {
        for (t, &tap) in tile.taps.iter().enumerate() {
            for pair in 0..pairs_of(tile, block) {
                let offset = (block * PAIRS + pair) * tile.channel_stride + t * PANEL;
                // SAFETY: the weights of this pair and tap, inside the panel.
                let weights = unsafe { std::slice::from_raw_parts(w.add(offset), width) };
                for (pixel, sums) in sums.iter_mut().enumerate().take(tile.pixels) {
                    // SAFETY: the input word of this pixel, tap and pair, in the buffer.
                    let a = unsafe {
                        *x.add(block * tile.block_stride + tile.inputs[pixel] + tap + pair)
                    };
                    for (sum, &b) in sums[..width].iter_mut().zip(weights) {
                        *sum = dot_pair(*sum, a, b);
                    }
                }
            }
        }
    }
    // SAFETY: the caller's contract.
    unsafe { portable_store(tile, finish, &sums) };
}

#[cfg(target_arch = "x86_64")]
mod amx;

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::super::avx512::{by_shape, start, store, Sums};
    use super::{pairs_of, Finish, Tile, BLOCK, PAIRS, PANEL};

    /// The bf16 tiles.
    struct Bf16;

    impl Sums for Bf16 {
        unsafe fn sums<const P: usize, const V: usize>(
            tile: &Tile<'_>,
            finish: Option<&Finish<'_>>,
        ) {
            // SAFETY: the caller's contract (the CPU has AVX512-BF16).
            unsafe { sums::<P, V>(tile, finish) }
        }
    }

    /// # Safety
    /// The CPU has AVX-512F and AVX512-BF16; as the float32 tiles, for this tile.
    pub(super) unsafe fn tile(tile: &Tile<'_>, finish: Option<&Finish<'_>>) {
        // SAFETY: the caller's contract.
        unsafe { by_shape::<Bf16>(tile, finish) }
    }

    /// `P` pixels x `V` blocks of 16 filters, from the sums earlier passes left (or zero)
    /// to the stores, the accumulators in registers throughout.
    #[target_feature(enable = "avx512f,avx512bf16")]
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

    /// Reinterprets 16 words of bf16 pairs as the instruction's operand type.
    #[inline(always)]
    fn bh(words: __m512i) -> __m512bh {
        // SAFETY: both are 512-bit vectors of plain bits, every pattern valid for each.
        unsafe { std::mem::transmute::<__m512i, __m512bh>(words) }
    }

    /// The tile's sums from `start`: per pair of every tap, `V` weight vectors and `P`
    /// broadcast words (`CONTIGUOUS`: pixel `p`'s words `8 p` after the first pixel's).
    ///
    /// # Safety
    /// As `sums`.
    #[target_feature(enable = "avx512f,avx512bf16")]
    #[inline]
    unsafe fn accumulate<const P: usize, const V: usize, const CONTIGUOUS: bool>(
        tile: &Tile<'_>,
        start: [[__m512; V]; P],
    ) -> [[__m512; V]; P] {
        let mut sums = start;
        let mut next_pass = super::super::NextPass::of(tile);
        let (x, w) = (tile.x.cast::<u32>(), tile.w.cast::<u32>());
        // SAFETY: the function's contract: every input word, weight and output addressed
        // lies in the padded buffer, its checked tensor or the tile's output.
        unsafe {
            for block in 0..tile.blocks {
                let pairs = pairs_of(tile, block);
                let x = x.add(block * tile.block_stride);
                let w = w.add(block * PAIRS * tile.channel_stride);
                for (t, &tap) in tile.taps.iter().enumerate() {
                    next_pass.tap();
                    let inputs: [*const u32; P] = if CONTIGUOUS {
                        let first = x.add(tile.inputs[0] + tap);
                        std::array::from_fn(|pixel| first.add(pixel * PAIRS))
                    } else {
                        std::array::from_fn(|pixel| x.add(tile.inputs[pixel] + tap))
                    };
                    let weights = w.add(t * PANEL);
                    let mut step = |pair: usize| {
                        let row = weights.add(pair * tile.channel_stride);
                        let b: [__m512bh; V] = std::array::from_fn(|vector| {
                            bh(_mm512_loadu_si512(row.add(vector * BLOCK).cast()))
                        });
                        for (sums, input) in sums.iter_mut().zip(&inputs) {
                            let a = bh(_mm512_set1_epi32(*input.add(pair) as i32));
                            for (sum, b) in sums.iter_mut().zip(&b) {
                                *sum = _mm512_dpbf16_ps(*sum, a, *b);
                            }
                        }
                    };
                    if pairs == PAIRS {
                        for pair in 0..PAIRS {
                            step(pair);
                        }
                    } else {
                        for pair in 0..pairs {
                            step(pair);
                        }
                    }
                }
            }
        }
        sums
    }
}

#[cfg(test)]
mod tests;
