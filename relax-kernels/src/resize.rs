//! ONNX's Resize (opsets 11 to 19) with the scales or sizes known only at run time: the
//! upsampling of detector and segmenter heads whose input sizes are symbolic, and the
//! graphs that compute the scales.
//!
//! `relax_runtime.resize(x, sizing[4 * rank], by_sizes, policy, mode, coordinates,
//! nearest, cubic_a, exclude_outside, extrapolation, antialias, out)`. `sizing` holds, per
//! axis of `x`, four values: whether the axis is one of the operator's `axes` (1 or 0),
//! its scale (`by_sizes` 0) or its output size (`by_sizes` 1), and the start and end of
//! its region of interest (used by `tf_crop_and_resize`). The kernel derives every
//! axis' output size and scale as ONNX does (with `keep_aspect_ratio_policy` 0 stretch, 1
//! not_larger, 2 not_smaller), refuses an `out` of another shape, then resamples one axis
//! at a time, as ONNX's separable definition allows: each output index is a weighted sum
//! of input indices along that axis (nearest: one; linear: two, or more with antialias;
//! cubic: four, or more), in f64. The enums are numbered as [`Mode`], [`Coordinates`] and
//! [`Nearest`] list them.

use super::tensor::{Arguments, View};

/// The interpolation (`mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Nearest,
    Linear,
    Cubic,
}

/// How an output index maps to an input coordinate (`coordinate_transformation_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Coordinates {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfCropAndResize,
}

/// How a coordinate between two input indices rounds in nearest mode (`nearest_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Nearest {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

/// The operator's attributes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub(crate) mode: Mode,
    pub(crate) coordinates: Coordinates,
    pub(crate) nearest: Nearest,
    pub(crate) cubic_a: f64,
    pub(crate) exclude_outside: bool,
    pub(crate) extrapolation: f64,
    pub(crate) antialias: bool,
}

/// One axis as the operator sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Axis {
    pub(crate) input: usize,
    /// One of the operator's `axes`.
    pub(crate) listed: bool,
    /// The scale, or with sizes the output size.
    pub(crate) value: f64,
    pub(crate) roi: (f64, f64),
}

/// Sizing policy with sizes (`keep_aspect_ratio_policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Policy {
    Stretch,
    NotLarger,
    NotSmaller,
}

/// Each axis' (output size, scale), as ONNX derives them from scales or sizes.
pub(crate) fn output_sizes(
    axes: &[Axis],
    by_sizes: bool,
    policy: Policy,
) -> Result<Vec<(usize, f64)>, String> {
    let whole = |value: f64, what: &str| {
        if value.is_finite() && value >= 0.0 && value <= i64::MAX as f64 {
            Ok(value as usize)
        } else {
            Err(format!("{what} {value} is not a size"))
        }
    };
    if !by_sizes {
        return axes
            .iter()
            .map(|axis| {
                let scale = if axis.listed { axis.value } else { 1.0 };
                if !(scale > 0.0 && scale.is_finite()) {
                    return Err(format!("scale {scale} is not positive"));
                }
                Ok((whole((axis.input as f64 * scale).floor(), "size")?, scale))
            })
            .collect();
    }
    let ratio = |axis: &Axis| axis.value / axis.input as f64;
    let common = match policy {
        Policy::Stretch => None,
        Policy::NotLarger => axes
            .iter()
            .filter(|axis| axis.listed)
            .map(ratio)
            .reduce(f64::min),
        Policy::NotSmaller => axes
            .iter()
            .filter(|axis| axis.listed)
            .map(ratio)
            .reduce(f64::max),
    };
    axes.iter()
        .map(|axis| {
            if !axis.listed {
                return Ok((axis.input, 1.0));
            }
            if axis.input == 0 {
                return Err("an empty axis cannot be resized to a size".to_string());
            }
            match common {
                Some(scale) => Ok((
                    whole((scale * axis.input as f64 + 0.5).floor(), "size")?,
                    scale,
                )),
                None => Ok((whole(axis.value, "size")?, ratio(axis))),
            }
        })
        .collect()
}

/// The input coordinate output index `index` maps to.
fn source_coordinate(
    coordinates: Coordinates,
    index: usize,
    out_len: usize,
    in_len: usize,
    scale: f64,
    roi: (f64, f64),
) -> f64 {
    let y = index as f64;
    let (in_len_f, scaled_len) = (in_len as f64, scale * in_len as f64);
    match coordinates {
        Coordinates::AlignCorners if scaled_len == 1.0 => 0.0,
        Coordinates::AlignCorners => y * (in_len_f - 1.0) / (scaled_len - 1.0),
        Coordinates::Asymmetric => y / scale,
        Coordinates::TfCropAndResize => {
            let (start, end) = roi;
            if scaled_len == 1.0 {
                (end - start) * (in_len_f - 1.0) / 2.0 + start * (in_len_f - 1.0)
            } else {
                y * (end - start) * (in_len_f - 1.0) / (scaled_len - 1.0) + start * (in_len_f - 1.0)
            }
        }
        Coordinates::PytorchHalfPixel if scaled_len == 1.0 => -0.5,
        Coordinates::PytorchHalfPixel | Coordinates::HalfPixel => (y + 0.5) / scale - 0.5,
        Coordinates::HalfPixelSymmetric => {
            let offset = in_len_f / 2.0 * (1.0 - out_len as f64 / scaled_len);
            offset + (y + 0.5) / scale - 0.5
        }
    }
}

/// The input index nearest to `x`.
fn nearest_index(x: f64, rounding: Nearest) -> i64 {
    let low = x.floor();
    let fraction = x - low;
    if fraction == 0.0 {
        return low as i64;
    }
    let up = match rounding {
        Nearest::RoundPreferFloor => fraction > 0.5,
        Nearest::RoundPreferCeil => fraction >= 0.5,
        Nearest::Floor => false,
        Nearest::Ceil => true,
    };
    low as i64 + i64::from(up)
}

fn cubic(t: f64, a: f64) -> f64 {
    let t = t.abs();
    if t <= 1.0 {
        (a + 2.0) * t.powi(3) - (a + 3.0) * t.powi(2) + 1.0
    } else if t < 2.0 {
        a * t.powi(3) - 5.0 * a * t.powi(2) + 8.0 * a * t - 4.0 * a
    } else {
        0.0
    }
}

/// What an output index of one axis reads: (input index, weight) pairs, or the
/// extrapolation value (a coordinate outside the input with `tf_crop_and_resize`).
#[derive(Debug, PartialEq)]
enum Taps {
    Weighted(Vec<(usize, f64)>),
    Outside,
}

/// The taps of every output index of an axis of `in_len` (at least 1) resized to
/// `out_len` with `scale`.
fn axis_taps(
    in_len: usize,
    out_len: usize,
    scale: f64,
    roi: (f64, f64),
    settings: &Settings,
) -> Vec<Taps> {
    let last = in_len as i64 - 1;
    let clamp = |index: i64| index.clamp(0, last) as usize;
    (0..out_len)
        .map(|index| {
            let x = source_coordinate(settings.coordinates, index, out_len, in_len, scale, roi);
            if settings.coordinates == Coordinates::TfCropAndResize && (x < 0.0 || x > last as f64)
            {
                return Taps::Outside;
            }
            if settings.mode == Mode::Nearest {
                return Taps::Weighted(vec![(clamp(nearest_index(x, settings.nearest)), 1.0)]);
            }
            let support = if settings.mode == Mode::Linear {
                1.0
            } else {
                2.0
            };
            let stretch = if settings.antialias {
                scale.min(1.0)
            } else {
                1.0
            };
            let reach = support / stretch;
            let (first, end) = ((x - reach).floor() as i64, (x + reach).ceil() as i64);
            let mut taps: Vec<(i64, f64)> = (first..=end)
                .map(|tap| {
                    let distance = (tap as f64 - x) * stretch;
                    let weight = match settings.mode {
                        Mode::Linear => (1.0 - distance.abs()).max(0.0),
                        _ => cubic(distance, settings.cubic_a),
                    };
                    (tap, weight)
                })
                .collect();
            if settings.antialias {
                normalize(&mut taps);
            }
            if settings.exclude_outside {
                for (tap, weight) in &mut taps {
                    if *tap < 0 || *tap > last {
                        *weight = 0.0;
                    }
                }
                normalize(&mut taps);
            }
            Taps::Weighted(
                taps.into_iter()
                    .filter(|&(_, weight)| weight != 0.0)
                    .map(|(tap, weight)| (clamp(tap), weight))
                    .collect(),
            )
        })
        .collect()
}

/// Scales the weights to sum to 1 (unless they sum to 0).
fn normalize(taps: &mut [(i64, f64)]) {
    let sum: f64 = taps.iter().map(|&(_, weight)| weight).sum();
    if sum != 0.0 {
        for (_, weight) in taps.iter_mut() {
            *weight /= sum;
        }
    }
}

/// `values` (of shape `dims`) resampled along `axis` by `taps` (one per output index).
fn resample(values: &[f64], dims: &[usize], axis: usize, taps: &[Taps], fill: f64) -> Vec<f64> {
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product();
    let (in_len, out_len) = (dims[axis], taps.len());
    let mut out = vec![0.0; outer * out_len * inner];
    for block in 0..outer {
        let source = &values[block * in_len * inner..(block + 1) * in_len * inner];
        let target = &mut out[block * out_len * inner..(block + 1) * out_len * inner];
        for (row, taps) in target.chunks_exact_mut(inner.max(1)).zip(taps) {
            match taps {
                Taps::Outside => row.fill(fill),
                Taps::Weighted(taps) => {
                    for &(index, weight) in taps {
                        let from = &source[index * inner..(index + 1) * inner];
                        for (value, &read) in row.iter_mut().zip(from) {
                            *value += weight * read;
                        }
                    }
                }
            }
        }
    }
    out
}

/// `input` (of shape `dims`) resized: the output's values, of the shape of the sizes
/// `output_sizes` gives.
pub(crate) fn resize_values(
    input: &[f32],
    axes: &[Axis],
    sizes: &[(usize, f64)],
    settings: &Settings,
) -> Vec<f32> {
    let mut dims: Vec<usize> = axes.iter().map(|axis| axis.input).collect();
    let mut values: Vec<f64> = input.iter().map(|&value| f64::from(value)).collect();
    for (index, (axis, &(size, scale))) in axes.iter().zip(sizes).enumerate() {
        let unchanged = size == axis.input && scale == 1.0 && axis.roi == (0.0, 1.0);
        if unchanged || size == 0 || axis.input == 0 {
            dims[index] = size;
            if size == 0 || axis.input == 0 {
                values.clear();
            }
            continue;
        }
        let taps = axis_taps(axis.input, size, scale, axis.roi, settings);
        values = resample(&values, &dims, index, &taps, settings.extrapolation);
        dims[index] = size;
    }
    let count: usize = dims.iter().product();
    values.resize(count, 0.0);
    values.into_iter().map(|value| value as f32).collect()
}

/// The values of a checked input tensor.
fn read<'a>(view: &View<'a>) -> &'a [f32] {
    if view.len() == 0 {
        return &[];
    }
    // SAFETY: an argument's tensor is valid for reads of its shape's elements for 'a
    // (`Argument`'s constructors), and the kernel checked that no output overlaps it.
    unsafe { std::slice::from_raw_parts(view.data.cast_const(), view.len()) }
}

fn settings(args: &Arguments<'_>) -> Result<Settings, String> {
    let name = args.name;
    let pick = |index: usize, what: &str, count: usize| -> Result<usize, String> {
        let value = args.int(index)?;
        usize::try_from(value)
            .ok()
            .filter(|&value| value < count)
            .ok_or_else(|| format!("{name}: {what} {value} is not one of 0..{count}"))
    };
    Ok(Settings {
        mode: [Mode::Nearest, Mode::Linear, Mode::Cubic][pick(4, "mode", 3)?],
        coordinates: [
            Coordinates::HalfPixel,
            Coordinates::HalfPixelSymmetric,
            Coordinates::PytorchHalfPixel,
            Coordinates::AlignCorners,
            Coordinates::Asymmetric,
            Coordinates::TfCropAndResize,
        ][pick(5, "coordinate mode", 6)?],
        nearest: [
            Nearest::RoundPreferFloor,
            Nearest::RoundPreferCeil,
            Nearest::Floor,
            Nearest::Ceil,
        ][pick(6, "nearest mode", 4)?],
        cubic_a: args.float(7)?,
        exclude_outside: args.int(8)? != 0,
        extrapolation: args.float(9)?,
        antialias: args.int(10)? != 0,
    })
}

/// `relax_runtime.resize`: see the module's documentation.
pub(crate) fn resize(args: &Arguments<'_>) -> Result<(), String> {
    args.expect_count(12)?;
    let name = args.name;
    let x = args.tensor(0, None)?;
    let sizing = args.tensor(1, Some(1))?;
    let out = args.output(11, Some(x.shape.len()))?;
    let by_sizes = args.int(2)? != 0;
    let policy = [Policy::Stretch, Policy::NotLarger, Policy::NotSmaller]
        .get(usize::try_from(args.int(3)?).unwrap_or(usize::MAX))
        .copied()
        .ok_or_else(|| {
            format!(
                "{name}: policy {} is not one of 0..3",
                args.int(3).unwrap_or(-1)
            )
        })?;
    let settings = settings(args)?;
    let rank = x.shape.len();
    if sizing.len() != 4 * rank {
        return Err(format!(
            "{name}: sizing has {} values, not 4 per axis of x {:?}",
            sizing.len(),
            x.shape
        ));
    }
    x.check_disjoint(&out)?;
    sizing.check_disjoint(&out)?;
    let sizing_values = read(&sizing);
    let axes: Vec<Axis> = x
        .shape
        .iter()
        .zip(sizing_values.chunks_exact(4))
        .map(|(&dim, values)| Axis {
            input: dim as usize,
            listed: values[0] != 0.0,
            value: f64::from(values[1]),
            roi: (f64::from(values[2]), f64::from(values[3])),
        })
        .collect();
    let sizes =
        output_sizes(&axes, by_sizes, policy).map_err(|error| format!("{name}: {error}"))?;
    let expected: Vec<i64> = sizes.iter().map(|&(size, _)| size as i64).collect();
    if out.shape != expected.as_slice() {
        return Err(format!(
            "{name}: x {:?} resizes to {expected:?}, but out is {:?}",
            x.shape, out.shape
        ));
    }
    let values = resize_values(read(&x), &axes, &sizes, &settings);
    if !values.is_empty() {
        // SAFETY: `out` is the call's output, valid for writes of its shape's elements
        // (as many as `values`, whose shape was just checked) and overlapping no input.
        let target = unsafe { std::slice::from_raw_parts_mut(out.data, out.len()) };
        target.copy_from_slice(&values);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
