//! Convolutions onto a few output pixels (1 to [`MAX_PIXELS`]) as dot products along
//! each filter's depth: a streaming model's layers over a short window (silero-vad's
//! STFT, a convolution of 258 filters of 256 taps onto 4 pixels, and its encoder's 3-tap
//! convolutions onto 4, 2 and 1 pixels).
//!
//! As a matrix product (im2col, then strips of 16 pixels along the vector lanes), such a
//! layer fills 4 of a vector's 16 lanes or fewer. Here the lanes run along the depth
//! (channels by taps) instead: each output pixel's patch is gathered once, contiguous and
//! zero-padded to whole vectors, and a tile of [`FILTERS`] filters by up to [`PIXELS`]
//! pixels sums 16 products at a time, each filter's OIHW weights (its depth contiguous)
//! read once per tile, then adds the 16 lanes of each sum together.

use std::cell::RefCell;

use super::conv_operands::{finish_of, Conv2d, Operands};
use super::parallel::{chunk, Launch, Shared, INLINE_WORK};
use super::scratch::{prefix, reuse};
use super::simd::{avx512_available, mul_add, multiversion};

/// Output pixels up to which [`computes`] takes a convolution: from 16 on, the strips'
/// vectors of pixels are full.
const MAX_PIXELS: usize = 8;

/// Filters summed together (each of their weights read once for the tile's pixels).
const FILTERS: usize = 4;

/// Pixels summed together: 4 filters by 4 pixels are 16 sums of 16 lanes, half of
/// AVX-512's registers, beside the 4 weight and 4 patch vectors.
const PIXELS: usize = 4;

/// Products a sum makes at a time (a vector of AVX-512).
const LANES: usize = 16;

thread_local! {
    /// The patches of the image being convolved, on the calling thread.
    static PATCHES: RefCell<Vec<f32>> = RefCell::default();
}

/// Whether the dot products compute `shape` best: one group, at most [`MAX_PIXELS`]
/// output pixels, on a CPU with AVX-512 (where they were measured: silero-vad's 6
/// convolutions took 18 us a call by strips, 4 by these).
pub(crate) fn computes(shape: &Conv2d) -> bool {
    let pixels = shape.output().map_or(0, |(height, width)| height * width);
    shape.groups == 1
        && shape.channels > 0
        && (1..=MAX_PIXELS).contains(&pixels)
        && avx512_available()
}

/// Convolves `operands` (an NCHW `x`, an OIHW `w`, one group, an NCHW `out`) by dot
/// products.
///
/// # Safety
/// `x`, `w`, `out` (and `residual`, of `out`'s shape) hold the values `shape` gives
/// them, with one group; `out` is written by this call alone and overlaps no input.
pub(crate) unsafe fn dot_conv(
    shape: &Conv2d,
    operands: Operands<'_>,
    launch: Launch,
) -> Result<(), String> {
    let Operands {
        x,
        w,
        per_filter,
        residual,
        epilogue,
        out,
    } = operands;
    if shape.groups != 1 {
        return Err(format!(
            "dot products take a convolution of one group, not {}",
            shape.groups
        ));
    }
    let (output_height, output_width) = shape
        .output()
        .ok_or("the kernel does not fit the padded input")?;
    let pixels = output_height * output_width;
    let filters = shape.filters;
    let depth = shape.channels * shape.kernel.0 * shape.kernel.1;
    if depth == 0 {
        return Err("dot products need input channels and kernel taps".to_string());
    }
    let padded_depth = depth.next_multiple_of(LANES);
    let image_values = shape.channels * shape.height * shape.width;
    // SAFETY: the caller's contract: `w` holds `F * C * KH * KW` values, read only.
    let w = unsafe { std::slice::from_raw_parts(w, filters * depth) };
    let residual = residual.map(|residual| Shared(residual.cast_mut()));
    reuse(&PATCHES, |patches| {
        let patches = prefix(patches, pixels * padded_depth);
        for image in 0..shape.batch {
            // SAFETY: image `image`'s values, read only (the caller's contract).
            let input =
                unsafe { std::slice::from_raw_parts(x.add(image * image_values), image_values) };
            gather_patches(shape, input, output_width, padded_depth, patches);
            let patches = &*patches;
            let first_output = image * filters * pixels;
            launch(filters * pixels * depth < INLINE_WORK, &|task, tasks| {
                let rows = chunk(filters, tasks, task, FILTERS);
                for first in rows.clone().step_by(FILTERS) {
                    let tile = first..(first + FILTERS).min(rows.end);
                    for start in (0..pixels).step_by(PIXELS) {
                        let count = PIXELS.min(pixels - start);
                        let patches = &patches[start * padded_depth..][..count * padded_depth];
                        let sums = sums_of(w, depth, tile.clone(), patches, padded_depth);
                        for (filter, sums) in tile.clone().zip(&sums) {
                            let at = first_output + filter * pixels + start;
                            // SAFETY: filter `filter`'s run of pixels from `start` in this
                            // image's output, this task's alone (tasks take disjoint
                            // filters), and its residual's, read only.
                            let (values, residual) = unsafe {
                                (
                                    std::slice::from_raw_parts_mut(out.at(at), count),
                                    residual.map(|residual| {
                                        std::slice::from_raw_parts(
                                            residual.at(at).cast_const(),
                                            count,
                                        )
                                    }),
                                )
                            };
                            values.copy_from_slice(&sums[..count]);
                            finish_of(per_filter, filter, residual, epilogue).apply(values);
                        }
                    }
                }
            })?;
        }
        Ok(())
    })
}

/// Writes each output pixel's patch (`C * KH * KW` values in OIHW's order, zeros where
/// the kernel reads padding, then zeros to `padded_depth`) to `patches`, a pixel after
/// another.
fn gather_patches(
    shape: &Conv2d,
    input: &[f32],
    output_width: usize,
    padded_depth: usize,
    patches: &mut [f32],
) {
    let (kernel_h, kernel_w) = shape.kernel;
    let (top, left, _, _) = shape.padding;
    for (pixel, patch) in patches.chunks_exact_mut(padded_depth).enumerate() {
        let (oy, ox) = (pixel / output_width, pixel % output_width);
        patch.fill(0.0);
        for channel in 0..shape.channels {
            let plane =
                &input[channel * shape.height * shape.width..][..shape.height * shape.width];
            for ky in 0..kernel_h {
                let y = (oy * shape.stride.0 + ky * shape.dilation.0).checked_sub(top);
                let Some(row) = y.filter(|&y| y < shape.height) else {
                    continue;
                };
                let row = &plane[row * shape.width..][..shape.width];
                let taps = &mut patch[(channel * kernel_h + ky) * kernel_w..][..kernel_w];
                for (kx, tap) in taps.iter_mut().enumerate() {
                    let column = (ox * shape.stride.1 + kx * shape.dilation.1).checked_sub(left);
                    if let Some(&value) = column.and_then(|column| row.get(column)) {
                        *tap = value;
                    }
                }
            }
        }
    }
}

/// The sums of filters `tile` (at most [`FILTERS`]; OIHW rows of `depth` weights in `w`)
/// with each patch of `patches` (at most [`PIXELS`], `padded_depth` apart):
/// `sums[filter - tile.start][patch]`.
fn sums_of(
    w: &[f32],
    depth: usize,
    tile: std::ops::Range<usize>,
    patches: &[f32],
    padded_depth: usize,
) -> [[f32; PIXELS]; FILTERS] {
    let mut sums = [[0f32; PIXELS]; FILTERS];
    #[cfg(target_arch = "x86_64")]
    if avx512_available() {
        // SAFETY: the CPU has AVX-512F.
        unsafe { avx512::tile_sums(w, depth, tile, patches, padded_depth, &mut sums) };
        return sums;
    }
    tile_sums(w, depth, tile, patches, padded_depth, &mut sums);
    sums
}

multiversion! {
    /// [`sums_of`] in 16-lane arrays the compiler vectorizes (the reference for the
    /// AVX-512 tile).
    fn tile_sums<const FMA: bool>(
        w: &[f32],
        depth: usize,
        tile: std::ops::Range<usize>,
        patches: &[f32],
        padded_depth: usize,
        sums: &mut [[f32; PIXELS]; FILTERS],
    ) {
        // A partial tile repeats its last filter, whose sums are then left unread.
        let rows: [&[f32]; FILTERS] =
            std::array::from_fn(|index| &w[(tile.start + index).min(tile.end - 1) * depth..][..depth]);
        let count = patches.len() / padded_depth;
        let mut lanes = [[[0f32; LANES]; PIXELS]; FILTERS];
        let whole = depth / LANES * LANES;
        let mut tail = [[0f32; LANES]; FILTERS];
        for (tail, row) in tail.iter_mut().zip(&rows) {
            tail[..depth - whole].copy_from_slice(&row[whole..]);
        }
        for start in (0..padded_depth).step_by(LANES) {
            let weights: [&[f32; LANES]; FILTERS] = std::array::from_fn(|index| {
                if start < whole {
                    rows[index][start..start + LANES].try_into().expect("LANES weights")
                } else {
                    &tail[index]
                }
            });
            for pixel in 0..PIXELS {
                // Past `count`, the first patch again (its sums are left unread), so
                // that the loop has a constant count.
                let at = if pixel < count { pixel } else { 0 } * padded_depth + start;
                let values: &[f32; LANES] = patches[at..at + LANES].try_into().expect("LANES values");
                for (lanes, weights) in lanes.iter_mut().zip(&weights) {
                    for lane in 0..LANES {
                        lanes[pixel][lane] = mul_add::<FMA>(weights[lane], values[lane], lanes[pixel][lane]);
                    }
                }
            }
        }
        for (sums, lanes) in sums.iter_mut().zip(&lanes) {
            for (sum, lanes) in sums.iter_mut().zip(lanes) {
                *sum = lane_sum(lanes);
            }
        }
    }
}

/// The 16 lanes added as halves, so that the additions run as vectors.
#[inline(always)]
fn lane_sum(lanes: &[f32; LANES]) -> f32 {
    let mut values = *lanes;
    let mut width = LANES / 2;
    while width > 0 {
        for lane in 0..width {
            values[lane] += values[lane + width];
        }
        width /= 2;
    }
    values[0]
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{FILTERS, LANES, PIXELS};

    /// [`super::sums_of`] into `sums`, on AVX-512: the 16 sums in registers, each weight
    /// vector loaded once for the tile's pixels.
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tile_sums(
        w: &[f32],
        depth: usize,
        tile: std::ops::Range<usize>,
        patches: &[f32],
        padded_depth: usize,
        sums: &mut [[f32; PIXELS]; FILTERS],
    ) {
        // A partial tile repeats its last filter, a short one its first patch: their
        // sums are left unread.
        let rows: [&[f32]; FILTERS] = std::array::from_fn(|index| {
            &w[(tile.start + index).min(tile.end - 1) * depth..][..depth]
        });
        let count = patches.len() / padded_depth;
        let patch: [&[f32]; PIXELS] = std::array::from_fn(|pixel| {
            &patches[if pixel < count { pixel } else { 0 } * padded_depth..][..padded_depth]
        });
        let mut lanes = [[_mm512_setzero_ps(); PIXELS]; FILTERS];
        for start in (0..padded_depth).step_by(LANES) {
            // The last vector of a row reads only its remaining weights (the patches are
            // zero past `depth`).
            let mask: __mmask16 = if start + LANES <= depth {
                !0
            } else {
                (1u16 << (depth - start)) - 1
            };
            let mut values = [_mm512_setzero_ps(); PIXELS];
            for (values, patch) in values.iter_mut().zip(&patch) {
                let patch = &patch[start..start + LANES];
                // SAFETY: `patch` holds 16 values.
                *values = unsafe { _mm512_loadu_ps(patch.as_ptr()) };
            }
            for (lanes, row) in lanes.iter_mut().zip(&rows) {
                // SAFETY: the lanes of `mask` are inside the row (`start + lane < depth`);
                // masked lanes are not read.
                let weights = unsafe { _mm512_maskz_loadu_ps(mask, row.as_ptr().add(start)) };
                for (lanes, &values) in lanes.iter_mut().zip(&values) {
                    *lanes = _mm512_fmadd_ps(weights, values, *lanes);
                }
            }
        }
        let mut totals = [0f32; FILTERS * PIXELS];
        // SAFETY: `totals` holds 16 values.
        unsafe { _mm512_storeu_ps(totals.as_mut_ptr(), lanes_added(&lanes)) };
        for (filter, sums) in sums.iter_mut().enumerate() {
            for (pixel, sum) in sums.iter_mut().enumerate() {
                *sum = totals[pixel * FILTERS + filter];
            }
        }
    }

    /// The 16 lanes of each of the 16 sums added together, as one vector whose value
    /// `pixel * 4 + filter` is the total of `lanes[filter][pixel]`: halves of sums
    /// shuffled together and added in four rounds (a transpose as it adds), 24 shuffles
    /// and 15 additions instead of 16 reductions of 8 steps each.
    #[target_feature(enable = "avx512f")]
    fn lanes_added(lanes: &[[__m512; PIXELS]; FILTERS]) -> __m512 {
        const _: () = assert!(FILTERS * PIXELS == 16);
        // a[4f + p]: the sum of filter f and pixel p.
        let a: [__m512; 16] = std::array::from_fn(|index| lanes[index / PIXELS][index % PIXELS]);
        // Quarters (128 bits): [a2k(q0+q2), a2k(q1+q3), a2k+1(q0+q2), a2k+1(q1+q3)].
        let b: [__m512; 8] = std::array::from_fn(|k| {
            let (x, y) = (a[2 * k], a[2 * k + 1]);
            _mm512_add_ps(
                _mm512_shuffle_f32x4::<0x44>(x, y),
                _mm512_shuffle_f32x4::<0xEE>(x, y),
            )
        });
        // Quarters: a4m..a4m+3, each 4 partial sums.
        let c: [__m512; 4] = std::array::from_fn(|m| {
            let (x, y) = (b[2 * m], b[2 * m + 1]);
            _mm512_add_ps(
                _mm512_shuffle_f32x4::<0x88>(x, y),
                _mm512_shuffle_f32x4::<0xDD>(x, y),
            )
        });
        // Quarter q: [a8n+q, a8n+4+q, a8n+q, a8n+4+q], each 2 partial sums.
        let d: [__m512; 2] = std::array::from_fn(|n| {
            let (x, y) = (c[2 * n], c[2 * n + 1]);
            _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y))
        });
        // Quarter q: the totals of aq, a4+q, a8+q, a12+q (filters 0-3, pixel q).
        _mm512_add_ps(
            _mm512_shuffle_ps::<0x44>(d[0], d[1]),
            _mm512_shuffle_ps::<0xEE>(d[0], d[1]),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(
        channels: usize,
        width: usize,
        kernel: usize,
        stride: usize,
        groups: usize,
    ) -> Conv2d {
        Conv2d {
            batch: 1,
            channels,
            height: 1,
            width,
            filters: 8,
            kernel: (1, kernel),
            stride: (1, stride),
            padding: (0, 0, 0, 0),
            dilation: (1, 1),
            groups,
        }
    }

    #[test]
    fn the_avx512_tile_matches_the_portable_one() {
        // A depth of 37 (two whole vectors and a tail of 5), a partial tile of 3 filters
        // and 2 of 4 pixels.
        let depth: usize = 37;
        let padded_depth = depth.next_multiple_of(LANES);
        let w = crate::test_values(5 * depth, 1, 1.0);
        let mut patches = crate::test_values(2 * padded_depth, 2, 1.0);
        for patch in patches.chunks_exact_mut(padded_depth) {
            patch[depth..].fill(0.0);
        }
        let mut portable = [[0f32; PIXELS]; FILTERS];
        tile_sums(&w, depth, 2..5, &patches, padded_depth, &mut portable);
        for (filter, sums) in (2..5).zip(&portable) {
            for (pixel, &sum) in sums.iter().take(2).enumerate() {
                let expected: f32 = (0..depth)
                    .map(|k| w[filter * depth + k] * patches[pixel * padded_depth + k])
                    .sum();
                assert!((sum - expected).abs() < 1e-5, "{sum} {expected}");
            }
        }
        #[cfg(target_arch = "x86_64")]
        if avx512_available() {
            let mut fast = [[0f32; PIXELS]; FILTERS];
            // SAFETY: the CPU has AVX-512F.
            unsafe { avx512::tile_sums(&w, depth, 2..5, &patches, padded_depth, &mut fast) };
            for (fast, portable) in fast.iter().zip(&portable).take(3) {
                for (a, b) in fast.iter().zip(portable).take(2) {
                    assert!((a - b).abs() < 1e-5, "{a} {b}");
                }
            }
        }
    }

    #[test]
    fn few_pixels_of_one_group_are_taken_with_avx512() {
        // 4 pixels, and 8: taken where the CPU has AVX-512.
        assert_eq!(computes(&window(16, 640, 256, 128, 1)), avx512_available());
        assert_eq!(computes(&window(16, 10, 3, 1, 1)), avx512_available());
        // 9 pixels, two groups, no channels: never.
        assert!(!computes(&window(16, 11, 3, 1, 1)));
        assert!(!computes(&window(16, 6, 3, 1, 2)));
        assert!(!computes(&window(0, 6, 3, 1, 1)));
    }
}
