//! Changing a tensor between NCHW (`[N, C, H, W]`) and channel-blocked (`[N, C/16, H, W,
//! 16]`) layouts: what a CNN on blocked tensors does where a layer runs NCHW (a
//! convolution over channels that are not whole blocks, a network's input and output).
//!
//! TVM's compiled transform read 16 planes at once for each blocked row it wrote, one
//! value from each, and ran at about 1 GB/s: MobileNetV2's transforms of 56x56 planes
//! took 10% of the model. Here a unit of work is one row (`W` pixels) of one block of 16
//! channels: the 16 input rows are read in order and the blocked row written in order
//! (or the reverse), a transpose of 16 x `W` values in cache.

use super::blocked::BLOCK;
use super::parallel::{for_each_unit, Shared};
use super::simd::multiversion;
use super::tensor::Arguments;

/// Below this many values a transform runs on the calling thread alone.
const INLINE_VALUES: usize = 64 * 1024;

/// `relax_runtime.layout_blocked(x, out)`: `x` NCHW and `out` `[N, C / 16, H, W, 16]`
/// (to blocks), or `x` blocked and `out` NCHW (back); `C` a multiple of 16.
pub(crate) fn layout_blocked(args: &Arguments<'_>) -> Result<(), String> {
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

#[cfg(test)]
mod tests;
