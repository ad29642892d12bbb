//! Kernels over the rows of a tensor's last axis: softmax (after an optional additive
//! mask, broadcast over the rows), layer normalization, and sums, means, maxima and
//! minima over trailing axes. Each row is one pass to find
//! its statistics and one to write it, vectorized (see `simd`), rows split over the pool.

use super::parallel::{chunk, Launch, Shared};
use super::simd::{self, multiversion};
use super::tensor::{Arguments, View};

/// Below this many elements a kernel runs on the calling thread alone.
const INLINE_ELEMENTS: usize = 16 * 1024;

multiversion! {
    /// `out = softmax(input + mask)` over one row.
    fn softmax_row<const FMA: bool>(input: &[f32], mask: Option<&[f32]>, out: &mut [f32]) {
        match mask {
            Some(mask) => {
                for ((slot, value), addend) in out.iter_mut().zip(input).zip(mask) {
                    *slot = value + addend;
                }
            }
            None => out.copy_from_slice(input),
        }
        let top = simd::max(out);
        for slot in out.iter_mut() {
            *slot = simd::exp_with::<FMA>(*slot - top);
        }
        let scale = 1.0 / simd::sum(out);
        for slot in out.iter_mut() {
            *slot *= scale;
        }
    }
}

multiversion! {
    /// `out = (input - mean) / sqrt(variance + epsilon) * gamma + beta` over one row.
    fn layer_norm_row(input: &[f32], gamma: &[f32], beta: &[f32], epsilon: f32, out: &mut [f32]) {
        let count = input.len().max(1) as f32;
        let mean = simd::sum(input) / count;
        for (slot, value) in out.iter_mut().zip(input) {
            *slot = value - mean;
        }
        let mut squares = [0f32; simd::LANES];
        let mut chunks = out.chunks_exact(simd::LANES);
        for chunk in &mut chunks {
            for (lane, value) in squares.iter_mut().zip(chunk) {
                *lane += value * value;
            }
        }
        let variance = (squares.iter().sum::<f32>() + chunks.remainder().iter().map(|v| v * v).sum::<f32>()) / count;
        let scale = 1.0 / (variance + epsilon).sqrt();
        for ((slot, gamma), beta) in out.iter_mut().zip(gamma).zip(beta) {
            *slot = *slot * scale * gamma + beta;
        }
    }
}

multiversion! {
    /// The sums of consecutive `width`-long rows of `input`, scaled, into `out`.
    fn sum_rows(input: &[f32], width: usize, scale: f32, out: &mut [f32]) {
        for (slot, row) in out.iter_mut().zip(input.chunks_exact(width.max(1))) {
            *slot = simd::sum(row) * scale;
        }
    }
}

multiversion! {
    /// The largest value of each of the consecutive `width`-long rows of `input`, into
    /// `out` (NaNs skipped, as `f32::max` does; NEG_INFINITY for an empty row).
    fn max_rows(input: &[f32], width: usize, out: &mut [f32]) {
        for (slot, row) in out.iter_mut().zip(input.chunks_exact(width.max(1))) {
            *slot = simd::max(row);
        }
    }
}

multiversion! {
    /// The smallest value of each row, as `max_rows` (INFINITY for an empty row).
    fn min_rows(input: &[f32], width: usize, out: &mut [f32]) {
        for (slot, row) in out.iter_mut().zip(input.chunks_exact(width.max(1))) {
            *slot = -simd::max_negated(row);
        }
    }
}

/// What `relax_runtime.reduce_trailing` computes of each row (its `kind` argument).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Reduction {
    Sum,
    Mean,
    Max,
    Min,
}

impl Reduction {
    fn from_code(code: i64) -> Option<Reduction> {
        Some(match code {
            0 => Reduction::Sum,
            1 => Reduction::Mean,
            2 => Reduction::Max,
            3 => Reduction::Min,
            _ => return None,
        })
    }
}

/// Where each row's mask starts: a mask of `x`'s rank whose dims are `x`'s or 1
/// (broadcast), its last dim `x`'s.
struct MaskRows {
    /// Per leading dim of `x`: its extent, and the mask's stride along it (0: broadcast).
    dims: Vec<(usize, usize)>,
}

impl MaskRows {
    fn new(x: &View<'_>, mask: &View<'_>) -> Option<MaskRows> {
        let rank = x.shape.len();
        if mask.shape.len() != rank || rank == 0 || mask.shape[rank - 1] != x.shape[rank - 1] {
            return None;
        }
        let mut stride = mask.shape[rank - 1] as usize;
        let mut dims = Vec::with_capacity(rank - 1);
        for axis in (0..rank - 1).rev() {
            let (extent, theirs) = (x.shape[axis] as usize, mask.shape[axis] as usize);
            if theirs != extent && theirs != 1 {
                return None;
            }
            dims.push((extent, if theirs == 1 { 0 } else { stride }));
            stride *= theirs;
        }
        dims.reverse();
        Some(MaskRows { dims })
    }

    /// The offset of row `row`'s mask.
    fn offset(&self, mut row: usize) -> usize {
        let mut offset = 0;
        for &(extent, stride) in self.dims.iter().rev() {
            offset += (row % extent) * stride;
            row /= extent;
        }
        offset
    }
}

/// `out = softmax(x + mask)` along the last axis for `rows` rows of `width`.
///
/// # Safety
/// `x` and `out` hold `rows x width` values, `mask` (with its row offsets) what
/// `mask_rows` addresses; `out` overlaps neither.
unsafe fn softmax_into(
    rows: usize,
    width: usize,
    x: *const f32,
    mask: Option<(*const f32, &MaskRows)>,
    out: Shared,
    launch: Launch,
) -> Result<(), String> {
    let x = Shared(x.cast_mut());
    let mask = mask.map(|(data, rows)| (Shared(data.cast_mut()), rows));
    launch(rows * width < INLINE_ELEMENTS, &|task, tasks| {
        for row in chunk(rows, tasks, task, 1) {
            // SAFETY: row `row` of each tensor; this task alone writes it in `out`.
            let (input, output) = unsafe {
                (
                    std::slice::from_raw_parts(x.at(row * width), width),
                    std::slice::from_raw_parts_mut(out.at(row * width), width),
                )
            };
            // SAFETY: the mask row the broadcast maps this row to, read only.
            let mask = mask.map(|(data, rows)| unsafe {
                std::slice::from_raw_parts(data.at(rows.offset(row)), width)
            });
            softmax_row(input, mask, output);
        }
    })
}

fn softmax_with(args: &Arguments<'_>, has_mask: bool) -> Result<(), String> {
    args.expect_count(if has_mask { 3 } else { 2 })?;
    let name = args.name;
    let x = args.tensor(0, None)?;
    let mask = if has_mask {
        Some(args.tensor(1, None)?)
    } else {
        None
    };
    let out = args.output(if has_mask { 2 } else { 1 }, None)?;
    if x.shape.is_empty() || out.shape != x.shape {
        return Err(format!(
            "{name}: shapes do not fit: x {:?}, out {:?}",
            x.shape, out.shape
        ));
    }
    x.check_disjoint(&out)?;
    let mask_rows = match &mask {
        Some(mask) => {
            mask.check_disjoint(&out)?;
            Some(MaskRows::new(&x, mask).ok_or_else(|| {
                format!(
                    "{name}: the mask {:?} does not broadcast to x {:?}",
                    mask.shape, x.shape
                )
            })?)
        }
        None => None,
    };
    let width = x.dim_from_end(1);
    let rows = x.leading(1);
    let mask = mask
        .zip(mask_rows.as_ref())
        .map(|(mask, rows)| (mask.data.cast_const(), rows));
    // SAFETY: `out` has x's shape, the mask broadcasts to it (checked above), and the
    // tensors do not overlap.
    unsafe { softmax_into(rows, width, x.data, mask, Shared(out.data), args.launch) }
}

/// `relax_runtime.softmax(x, out)`: softmax along the last axis.
pub(crate) fn softmax(args: &Arguments<'_>) -> Result<(), String> {
    softmax_with(args, false)
}

/// `relax_runtime.softmax_add(x, mask, out)`: `softmax(x + mask)` along the last axis,
/// `mask` of x's rank broadcast over dims where it is 1.
pub(crate) fn softmax_add(args: &Arguments<'_>) -> Result<(), String> {
    softmax_with(args, true)
}

/// `relax_runtime.layer_norm(x, gamma, beta, epsilon, out)`: normalization along the last
/// axis, scaled by `gamma` and shifted by `beta` (both of the last axis' size).
pub(crate) fn layer_norm(args: &Arguments<'_>) -> Result<(), String> {
    args.expect_count(5)?;
    let name = args.name;
    let x = args.tensor(0, None)?;
    let gamma = args.tensor(1, Some(1))?;
    let beta = args.tensor(2, Some(1))?;
    let epsilon = args.float(3)? as f32;
    let out = args.output(4, None)?;
    if x.shape.is_empty()
        || out.shape != x.shape
        || gamma.len() != x.dim_from_end(1)
        || beta.len() != gamma.len()
    {
        return Err(format!(
            "{name}: shapes do not fit: x {:?}, gamma {:?}, beta {:?}, out {:?}",
            x.shape, gamma.shape, beta.shape, out.shape
        ));
    }
    x.check_disjoint(&out)?;
    let width = x.dim_from_end(1);
    let rows = x.leading(1);
    // SAFETY: checked float32 vectors of `width` values, read only during the call.
    let (gamma, beta) = unsafe {
        (
            std::slice::from_raw_parts(gamma.data.cast_const(), width),
            std::slice::from_raw_parts(beta.data.cast_const(), width),
        )
    };
    // SAFETY: as above.
    unsafe {
        layer_norm_into(
            rows,
            width,
            x.data,
            gamma,
            beta,
            epsilon,
            Shared(out.data),
            args.launch,
        )
    }
}

/// Layer normalization of `rows` rows of `width`.
///
/// # Safety
/// `x` and `out` hold `rows x width` values and do not overlap.
#[allow(clippy::too_many_arguments)]
unsafe fn layer_norm_into(
    rows: usize,
    width: usize,
    x: *const f32,
    gamma: &[f32],
    beta: &[f32],
    epsilon: f32,
    out: Shared,
    launch: Launch,
) -> Result<(), String> {
    let x = Shared(x.cast_mut());
    launch(rows * width < INLINE_ELEMENTS, &|task, tasks| {
        for row in chunk(rows, tasks, task, 1) {
            // SAFETY: row `row` of each tensor; this task alone writes it in `out`.
            let (input, output) = unsafe {
                (
                    std::slice::from_raw_parts(x.at(row * width), width),
                    std::slice::from_raw_parts_mut(out.at(row * width), width),
                )
            };
            layer_norm_row(input, gamma, beta, epsilon, output);
        }
    })
}

/// `relax_runtime.reduce_trailing(x, axes, kind, out)`: the sum (`kind` 0), mean (1),
/// maximum (2) or minimum (3) of `x` over its last `axes` axes; `out` has one value per
/// row (any shape with that many elements, so that `keepdims` needs nothing else).
pub(crate) fn reduce_trailing(args: &Arguments<'_>) -> Result<(), String> {
    args.expect_count(4)?;
    let name = args.name;
    let x = args.tensor(0, None)?;
    let axes =
        usize::try_from(args.int(1)?).map_err(|_| format!("{name}: a negative axis count"))?;
    let kind = args.int(2)?;
    let reduction = Reduction::from_code(kind).ok_or_else(|| {
        format!("{name}: reduction kind {kind} is none of 0 (sum), 1 (mean), 2 (max), 3 (min)")
    })?;
    let out = args.output(3, None)?;
    if axes == 0 || axes > x.shape.len() || out.len() != x.leading(axes) {
        return Err(format!(
            "{name}: shapes do not fit: x {:?} reduced over its last {axes} axes, out {:?}",
            x.shape, out.shape
        ));
    }
    x.check_disjoint(&out)?;
    let rows = out.len();
    let width = x.len() / rows.max(1);
    let scale = if reduction == Reduction::Mean {
        1.0 / width.max(1) as f32
    } else {
        1.0
    };
    let (x, out) = (Shared(x.data), Shared(out.data));
    (args.launch)(rows * width < INLINE_ELEMENTS, &|task, tasks| {
        let mine = chunk(rows, tasks, task, 1);
        // SAFETY: rows `mine` of x (read only) and their slots in out, which this task
        // alone writes; the sizes were checked above.
        let (input, output) = unsafe {
            (
                std::slice::from_raw_parts(x.at(mine.start * width), mine.len() * width),
                std::slice::from_raw_parts_mut(out.at(mine.start), mine.len()),
            )
        };
        match reduction {
            Reduction::Sum | Reduction::Mean => sum_rows(input, width, scale, output),
            Reduction::Max => max_rows(input, width, output),
            Reduction::Min => min_rows(input, width, output),
        }
    })
}

#[cfg(test)]
mod tests;
