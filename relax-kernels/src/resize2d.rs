//! TVM's `image.resize2d` with nearest or bilinear sampling, on NCHW (`[N, C, H, W]`) or
//! channel-blocked (`[N, C/16, H, W, 16]`) tensors: the upsampling in detector and
//! segmenter heads (an FPN's Resize between levels), whose output sizes are symbolic.
//!
//! `relax_runtime.resize2d(x, method, coordinates, rounding, out)` computes what TVM's
//! compiled loops do, in float32 and in the same order: each output index maps to an
//! input coordinate (`coordinates`, with the scale `input / output` of its axis), which
//! nearest sampling rounds (`rounding`) and bilinear sampling interpolates between the
//! two indices around it (`a (1 - t) + b t`, across then down); indices are clamped to
//! the input. The output size is `out`'s. TVM's loops compute every output value's
//! coordinates anew (1.8 million a call on an FPN level, 2.4 ms); here each output row
//! and column has its source worked out once, and a row is a copy or a blend of input
//! rows.

use super::blocked::BLOCK;
use super::parallel::{for_each_unit, Shared};
use super::tensor::Arguments;

/// Below this many output values a resize runs on the calling thread alone.
const INLINE_VALUES: usize = 64 * 1024;

/// Output values a unit of work takes at least (whole rows; a plane at most).
const UNIT_VALUES: usize = 4096;

/// The sampling (`method`): 0 nearest, 1 linear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    Nearest,
    Linear,
}

/// How an output index maps to an input coordinate (`coordinate_transformation_mode`):
/// 0 half_pixel, 1 align_corners, 2 asymmetric, 3 pytorch_half_pixel, 4
/// tf_half_pixel_for_nn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Coordinates {
    HalfPixel,
    AlignCorners,
    Asymmetric,
    PytorchHalfPixel,
    TfHalfPixelForNn,
}

/// How nearest sampling rounds a coordinate (`rounding_method`): 0 round (half to
/// even), 1 floor, 2 ceil, 3 round_prefer_floor, 4 round_prefer_ceil.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rounding {
    Round,
    Floor,
    Ceil,
    PreferFloor,
    PreferCeil,
}

impl Coordinates {
    /// The input coordinate of output index `index` along an axis of `input` values
    /// resized to `output`, as TVM's `get_inx` computes it.
    fn source(self, index: usize, input: usize, output: usize) -> f32 {
        let (x, input_f, output_f) = (index as f32, input as f32, output as f32);
        let scale = input_f / output_f;
        match self {
            Coordinates::HalfPixel => (x + 0.5) * scale - 0.5,
            Coordinates::AlignCorners => (input as f32 - 1.0) / (output as f32 - 1.0) * x,
            Coordinates::Asymmetric => scale * x,
            Coordinates::PytorchHalfPixel if output > 1 => (x + 0.5) * scale - 0.5,
            Coordinates::PytorchHalfPixel => 0.0,
            Coordinates::TfHalfPixelForNn => (x + 0.5) * scale,
        }
    }
}

impl Rounding {
    /// The index nearest to coordinate `x`, as TVM's `get_closest_index` rounds it.
    fn index(self, x: f32) -> i64 {
        // TVM's floor and ceil move the coordinate by this much first.
        const EPSILON: f32 = 1e-5;
        let rounded = match self {
            Rounding::Round => x.round_ties_even(),
            Rounding::Floor => (x + EPSILON).floor(),
            Rounding::Ceil => (x - EPSILON).ceil(),
            Rounding::PreferFloor => (x - 0.5).ceil(),
            Rounding::PreferCeil => (x + 0.5).floor(),
        };
        rounded as i64
    }
}

/// Where one output index (a row or a column) reads: the two input indices around its
/// coordinate and the second one's weight (nearest: the same index twice, weight 0).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Source {
    first: usize,
    second: usize,
    weight: f32,
}

/// The sources of the `output` indices of an axis of `input` values.
fn sources(
    method: Method,
    coordinates: Coordinates,
    rounding: Rounding,
    input: usize,
    output: usize,
) -> Vec<Source> {
    let last = input as i64 - 1;
    let clamp = |index: i64| index.clamp(0, last) as usize;
    (0..output)
        .map(|index| {
            let x = coordinates.source(index, input, output);
            match method {
                Method::Nearest => {
                    let nearest = clamp(rounding.index(x));
                    Source {
                        first: nearest,
                        second: nearest,
                        weight: 0.0,
                    }
                }
                Method::Linear => {
                    let low = x.floor();
                    Source {
                        first: clamp(low as i64),
                        second: clamp(low as i64 + 1),
                        weight: x - low,
                    }
                }
            }
        })
        .collect()
}

/// TVM's `_lerp`: `a (1 - t) + b t`.
#[inline(always)]
fn lerp(a: f32, b: f32, t: f32) -> f32 {
    a * (1.0 - t) + b * t
}

/// `relax_runtime.resize2d(x, method, coordinates, rounding, out)`: see the module's doc.
pub(crate) fn resize2d(args: &Arguments<'_>) -> Result<(), String> {
    args.expect_count(5)?;
    let name = args.name;
    let x = args.tensor(0, None)?;
    let out = args.output(4, None)?;
    let code = |index: usize, what: &str, count: i64| -> Result<i64, String> {
        let value = args.int(index)?;
        if (0..count).contains(&value) {
            Ok(value)
        } else {
            Err(format!("{name}: {what} {value} is not one of 0..{count}"))
        }
    };
    let method = [Method::Nearest, Method::Linear][code(1, "method", 2)? as usize];
    let coordinates = [
        Coordinates::HalfPixel,
        Coordinates::AlignCorners,
        Coordinates::Asymmetric,
        Coordinates::PytorchHalfPixel,
        Coordinates::TfHalfPixelForNn,
    ][code(2, "coordinates", 5)? as usize];
    let rounding = [
        Rounding::Round,
        Rounding::Floor,
        Rounding::Ceil,
        Rounding::PreferFloor,
        Rounding::PreferCeil,
    ][code(3, "rounding", 5)? as usize];
    let rank = x.shape.len();
    // `[N, C, H, W]`, or blocked `[N, C / 16, H, W, 16]`: the values of a pixel are the
    // trailing `lanes`.
    let fits = matches!(rank, 4 | 5)
        && out.shape.len() == rank
        && x.shape[..2] == out.shape[..2]
        && x.shape[4..] == out.shape[4..];
    if !fits {
        return Err(format!(
            "{name}: x {:?} and out {:?} should both be [N, C, H, W] or [N, C / 16, H, W, 16] with the same N and C",
            x.shape, out.shape
        ));
    }
    x.check_disjoint(&out)?;
    let dim = |shape: &[i64], index: usize| shape[index] as usize;
    let lanes = if rank == 5 { dim(x.shape, 4) } else { 1 };
    let (height, width) = (dim(x.shape, 2), dim(x.shape, 3));
    let (output_height, output_width) = (dim(out.shape, 2), dim(out.shape, 3));
    let planes = dim(x.shape, 0) * dim(x.shape, 1);
    if planes * output_height * output_width * lanes == 0 {
        return Ok(());
    }
    if height == 0 || width == 0 {
        return Err(format!(
            "{name}: x {:?} has no pixel to resize into out {:?}",
            x.shape, out.shape
        ));
    }
    let rows = sources(method, coordinates, rounding, height, output_height);
    let columns = sources(method, coordinates, rounding, width, output_width);
    let (input_plane, output_row) = (height * width * lanes, output_width * lanes);
    // A unit of work: a band of output rows of one plane, at least `UNIT_VALUES` values
    // (a plane at most). Within a band, a row of nearest samples from the same input row
    // as the row before it is a copy of that row (half the rows when upsampling 2x).
    let band = UNIT_VALUES.div_ceil(output_row).clamp(1, output_height);
    let bands = output_height.div_ceil(band);
    let units = planes * bands;
    let (x, out) = (Shared(x.data), Shared(out.data));
    for_each_unit(
        args.launch,
        planes * output_height * output_row < INLINE_VALUES,
        units,
        &|unit| {
            let (plane, band_index) = (unit / bands, unit % bands);
            let band_rows = band_index * band..((band_index + 1) * band).min(output_height);
            let first_row = plane * output_height + band_rows.start;
            // SAFETY: input plane `plane`, read only, and the band's output rows, which
            // this unit alone writes (`for_each_unit` runs each unit once, and bands do not
            // overlap); both inside the checked tensors, which do not overlap.
            let (input, output) = unsafe {
                (
                    std::slice::from_raw_parts(x.at(plane * input_plane).cast_const(), input_plane),
                    std::slice::from_raw_parts_mut(
                        out.at(first_row * output_row),
                        band_rows.len() * output_row,
                    ),
                )
            };
            let input_row = |index: usize| &input[index * width * lanes..][..width * lanes];
            let mut previous: Option<usize> = None;
            for (index, oy) in band_rows.enumerate() {
                let row = rows[oy];
                let (done, rest) = output.split_at_mut(index * output_row);
                let target = &mut rest[..output_row];
                match method {
                    Method::Nearest if previous == Some(row.first) => {
                        target.copy_from_slice(&done[(index - 1) * output_row..]);
                    }
                    Method::Nearest => {
                        sample_nearest(input_row(row.first), &columns, lanes, target)
                    }
                    Method::Linear => {
                        let (top, bottom) = (input_row(row.first), input_row(row.second));
                        sample_linear(top, bottom, row.weight, &columns, lanes, target);
                    }
                }
                previous = Some(row.first);
            }
        },
    )
}

super::simd::multiversion! {
    /// An output row of nearest samples: each column's pixel of input row `row`.
    fn sample_nearest(row: &[f32], columns: &[Source], lanes: usize, out: &mut [f32]) {
        match lanes {
            1 => {
                for (value, column) in out.iter_mut().zip(columns) {
                    *value = row[column.first];
                }
            }
            BLOCK => {
                for (pixel, column) in out.chunks_exact_mut(BLOCK).zip(columns) {
                    let pixel: &mut [f32; BLOCK] = pixel.try_into().expect("a block");
                    *pixel = row[column.first * BLOCK..][..BLOCK].try_into().expect("a block");
                }
            }
            _ => {
                for (pixel, column) in out.chunks_exact_mut(lanes).zip(columns) {
                    pixel.copy_from_slice(&row[column.first * lanes..][..lanes]);
                }
            }
        }
    }
}

super::simd::multiversion! {
    /// An output row of bilinear samples between input rows `top` and `bottom` (the
    /// latter weighted `down`): across each row, then down.
    fn sample_linear(
        top: &[f32],
        bottom: &[f32],
        down: f32,
        columns: &[Source],
        lanes: usize,
        out: &mut [f32],
    ) {
        let sample = |pixel: &mut [f32], column: &Source| {
            let (left, right) = (column.first * lanes, column.second * lanes);
            let (top_left, top_right) = (&top[left..][..pixel.len()], &top[right..][..pixel.len()]);
            let (bottom_left, bottom_right) =
                (&bottom[left..][..pixel.len()], &bottom[right..][..pixel.len()]);
            for (lane, value) in pixel.iter_mut().enumerate() {
                let upper = lerp(top_left[lane], top_right[lane], column.weight);
                let lower = lerp(bottom_left[lane], bottom_right[lane], column.weight);
                *value = lerp(upper, lower, down);
            }
        };
        match lanes {
            1 => out.chunks_exact_mut(1).zip(columns).for_each(|(pixel, column)| sample(pixel, column)),
            BLOCK => out
                .chunks_exact_mut(BLOCK)
                .zip(columns)
                .for_each(|(pixel, column)| sample(pixel, column)),
            _ => out
                .chunks_exact_mut(lanes)
                .zip(columns)
                .for_each(|(pixel, column)| sample(pixel, column)),
        }
    }
}

#[cfg(test)]
mod tests;
