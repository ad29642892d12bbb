//! The bf16 tiles on AMX: 16 output pixels x up to 64 filters, a tile register of 16 x 16
//! float32 sums per block of 16 filters (`tmm0`-`tmm3`). Per block of channels and tap,
//! the 16 pixels' 8 words of pairs are one input register (`tmm4`, 16 rows of 32 bytes:
//! a row per pixel), and each block of filters' weights one more (`tmm5`-`tmm7` in turn,
//! 8 rows of pairs x 16 filters: the panel's layout, rows `channel_stride` apart);
//! `tdpbf16ps` then adds 16 x 16 x 16 products to the block's sums.
//!
//! The input register loads rows a constant stride apart: the pixels of a 1x1 layer or of
//! one output row. Pixels across rows (a 3x3 layer's tiles that wrap) are first copied
//! into a gather buffer, per block and tap.

use std::arch::x86_64::{_mm512_loadu_ps, _mm512_storeu_ps};

use super::super::avx512::Finisher;
use super::super::NextPass;
use super::{pairs_of, Finish, Tile, AMX_PIXELS as PIXELS, BLOCK, PAIRS, PANEL};
use crate::amx::{config, load_input, multiply, sums_register, Move, SUMS_BYTES};

/// Computes `tile` (its input and weights in pairs) with `finish` on its last pass.
///
/// # Safety
/// As the float32 tiles; AMX-BF16 and AVX-512F run here and the process may use the
/// tiles ([`crate::amx::bf16_usable`]).
pub(super) unsafe fn tile(tile: &Tile<'_>, finish: Option<&Finish<'_>>) {
    // The registers' shapes: checked here, for every read below stays in the rows and
    // words these allow.
    assert!(
        (1..=PIXELS).contains(&tile.pixels)
            && (1..=PANEL / BLOCK).contains(&tile.vectors)
            && (0..tile.blocks).all(|block| pairs_of(tile, block) == PAIRS),
        "an AMX tile of 1-16 pixels, 1-4 blocks of filters and whole blocks of channels"
    );
    // SAFETY: the caller's contract, and the shapes just checked.
    unsafe {
        config(tile.pixels, PAIRS).load();
        let sums = |action: Move| {
            for vector in 0..tile.vectors {
                let at = tile.out.at(vector * tile.block_out_stride);
                sums_register(vector, action, at, SUMS_BYTES);
            }
        };
        sums(if tile.resume { Move::Load } else { Move::Zero });
        accumulate(tile);
        sums(Move::Store);
        if let Some(finish) = finish {
            finish_in_place(tile, finish);
        }
    }
}

/// The distance (words) between consecutive pixels' inputs when it is constant.
fn input_stride(tile: &Tile<'_>) -> Option<usize> {
    if tile.contiguous || tile.pixels == 1 {
        return Some(PAIRS);
    }
    let step = tile.inputs[1].checked_sub(tile.inputs[0])?;
    (2..tile.pixels)
        .all(|pixel| tile.inputs[pixel] == tile.inputs[0] + pixel * step)
        .then_some(step)
}

/// A gather buffer: one row of 8 words per pixel.
#[repr(C, align(64))]
struct Gathered([[u32; PAIRS]; PIXELS]);

/// The sums' registers plus every pass's products.
///
/// # Safety
/// As [`tile`], the tiles configured and the sums' registers started.
#[inline(always)]
unsafe fn accumulate(tile: &Tile<'_>) {
    let mut next_pass = NextPass::of(tile);
    let (x, w) = (tile.x.cast::<u32>(), tile.w.cast::<u32>());
    let stride = input_stride(tile);
    let mut gathered = Gathered([[0; PAIRS]; PIXELS]);
    let weight_stride = tile.channel_stride * 4;
    // SAFETY: the function's contract: every input word and weight addressed lies in the
    // padded buffer or the panel, as for the other tiles.
    unsafe {
        for block in 0..tile.blocks {
            let x = x.add(block * tile.block_stride);
            let w = w.add(block * PAIRS * tile.channel_stride);
            for (t, &tap) in tile.taps.iter().enumerate() {
                next_pass.tap();
                match stride {
                    Some(stride) => load_input(x.add(tile.inputs[0] + tap), stride * 4),
                    None => {
                        for (pixel, row) in gathered.0.iter_mut().enumerate().take(tile.pixels) {
                            let from = x.add(tile.inputs[pixel] + tap);
                            std::ptr::copy_nonoverlapping(from, row.as_mut_ptr(), PAIRS);
                        }
                        load_input(gathered.0.as_ptr().cast(), PAIRS * 4);
                    }
                }
                let weights = w.add(t * PANEL);
                for vector in 0..tile.vectors {
                    multiply(vector, weights.add(vector * BLOCK), weight_stride);
                }
            }
        }
    }
}

/// `finish` on the sums just stored in the tile's output.
///
/// # Safety
/// As [`tile`].
#[target_feature(enable = "avx512f")]
unsafe fn finish_in_place(tile: &Tile<'_>, finish: &Finish<'_>) {
    for vector in 0..tile.vectors {
        // SAFETY: the function's contract.
        let finisher = unsafe { Finisher::new(finish, vector) };
        for pixel in 0..tile.pixels {
            let offset = vector * tile.block_out_stride + pixel * BLOCK;
            // SAFETY: the tile's output, and its residual, at `offset`.
            unsafe {
                let at = tile.out.at(offset);
                _mm512_storeu_ps(at, finisher.apply(_mm512_loadu_ps(at), offset));
            }
        }
    }
}
