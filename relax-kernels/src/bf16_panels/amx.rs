//! The dense layers' bf16 tiles on AMX: 16 rows of `x` x a panel's 64 columns, a tile
//! register of 16 x 16 float32 sums per 16 columns (`tmm0`-`tmm3`). Each step loads 16
//! words of pairs (32 values of `k`) of the rows (`tmm4`: the rounded rows are its layout,
//! `ceil(k / 2)` words apart) and, per 16 columns, 16 rows of pairs of the panel (`tmm5`-
//! `tmm7` in turn, 64 words apart), then `tdpbf16ps` adds their 16 x 16 x 32 products.
//! The last step of a `k` that is not a multiple of 32 sums fewer pairs: its registers
//! are configured anew, which zeroes them, so the sums are stored and loaded around it.

use super::{add, Block, PANEL};
use crate::amx::{config, load_input, multiply, sums_register, Move};

/// Rows of `x` per tile: a tile register's rows.
const ROWS: usize = 16;

/// Pairs summed per step: a tile register's 64 bytes.
const STEP: usize = 16;

/// The bytes between rows of [`Sums`].
const SUMS_STRIDE: usize = PANEL * 4;

/// A tile's sums, stored: `ROWS` rows of a panel's 64 columns.
#[repr(C, align(64))]
struct Sums([[f32; PANEL]; ROWS]);

/// # Safety
/// AMX-BF16 runs here and the process may use the tiles ([`crate::amx::bf16_usable`]);
/// otherwise as `dense_into`, for this block's columns of `out`.
pub(super) unsafe fn block(block: &Block<'_>) {
    assert!(block.pairs > 0 && block.columns <= PANEL);
    let vectors = block.columns.div_ceil(16);
    let (whole, tail) = (block.pairs / STEP * STEP, block.pairs % STEP);
    let (x, w) = (block.x.as_ptr(), block.panel.as_ptr().cast::<u32>());
    let x_stride = block.pairs * 4;
    let mut sums = Sums([[0.0; PANEL]; ROWS]);
    for first in (0..block.m).step_by(ROWS) {
        let rows = ROWS.min(block.m - first);
        let x = x.wrapping_add(first * block.pairs);
        // SAFETY: the contract, and `Block`'s: `x` holds `m` rows of `pairs` words and the
        // panel `pairs` rows of 64 words, so every step's rows from `p` (16 pairs, or the
        // tail's) lie inside them; the sums go to `sums`, rows 64 values apart.
        unsafe {
            let all_sums = |action: Move, sums: &mut Sums| {
                for vector in 0..vectors {
                    let at = sums.0[0][vector * 16..].as_mut_ptr();
                    sums_register(vector, action, at, SUMS_STRIDE);
                }
            };
            let step = |p: usize| {
                load_input(x.add(p), x_stride);
                for vector in 0..vectors {
                    multiply(vector, w.add(p * PANEL + vector * 16), SUMS_STRIDE);
                }
            };
            if whole > 0 {
                config(rows, STEP).load();
                all_sums(Move::Zero, &mut sums);
                for p in (0..whole).step_by(STEP) {
                    step(p);
                }
                all_sums(Move::Store, &mut sums);
            }
            if tail > 0 {
                config(rows, tail).load();
                all_sums(if whole > 0 { Move::Load } else { Move::Zero }, &mut sums);
                step(whole);
                all_sums(Move::Store, &mut sums);
            }
        }
        for (row, sums) in sums.0.iter().enumerate().take(rows) {
            let offset = (first + row) * block.n + block.first_column;
            // SAFETY: this block's columns of row `first + row` (the contract).
            let out =
                unsafe { std::slice::from_raw_parts_mut(block.out.at(offset), block.columns) };
            out.copy_from_slice(&sums[..block.columns]);
            if let Some(bias) = block.bias {
                add(out, &bias[block.first_column..][..block.columns]);
            }
            if let Some(residual) = block.residual {
                add(out, &residual[offset..][..block.columns]);
            }
        }
    }
}
