//! The resize against ONNX's separable definition (`resize::resize_values`, in f64),
//! against values worked out by hand, blocked against NCHW, and refused arguments.

use super::*;
use crate::parallel::three_threads;
use crate::resize;
use crate::tensor::Argument;

fn run(x: &[f32], x_shape: &[i64], codes: [i64; 3], out_shape: &[i64]) -> Result<Vec<f32>, String> {
    let mut out = vec![f32::NAN; out_shape.iter().product::<i64>().max(0) as usize];
    let mut args = vec![Argument::input(x, x_shape)?];
    args.extend(codes.map(Argument::int));
    args.push(Argument::output(&mut out, out_shape)?);
    resize2d(&Arguments::new(
        "relax_runtime.resize2d",
        &args,
        three_threads,
    ))?;
    Ok(out)
}

fn values(count: usize) -> Vec<f32> {
    (0..count)
        .map(|index| ((index * 37 % 101) as f32 - 50.0) / 7.0)
        .collect()
}

/// ONNX's Resize of `x` (NCHW) to `out` (sizes) with the generic kernel's settings.
fn onnx_reference(
    x: &[f32],
    x_shape: [usize; 4],
    out: [usize; 4],
    mode: resize::Mode,
    coordinates: resize::Coordinates,
    nearest: resize::Nearest,
) -> Vec<f32> {
    let axes: Vec<resize::Axis> = x_shape
        .iter()
        .zip(out)
        .map(|(&input, output)| resize::Axis {
            input,
            listed: true,
            value: output as f64,
            roi: (0.0, 1.0),
        })
        .collect();
    let sizes = resize::output_sizes(&axes, true, resize::Policy::Stretch).unwrap();
    let settings = resize::Settings {
        mode,
        coordinates,
        nearest,
        cubic_a: -0.75,
        exclude_outside: false,
        extrapolation: 0.0,
        antialias: false,
    };
    resize::resize_values(x, &axes, &sizes, &settings)
}

#[test]
fn nearest_and_bilinear_samples_match_onnx_s_definition() {
    use resize::{Coordinates as Onnx, Mode, Nearest};
    let modes = [
        (0, Coordinates::HalfPixel, Onnx::HalfPixel),
        (1, Coordinates::AlignCorners, Onnx::AlignCorners),
        (2, Coordinates::Asymmetric, Onnx::Asymmetric),
        (3, Coordinates::PytorchHalfPixel, Onnx::PytorchHalfPixel),
    ];
    let roundings = [
        (1, Nearest::Floor),
        (2, Nearest::Ceil),
        (3, Nearest::RoundPreferFloor),
        (4, Nearest::RoundPreferCeil),
    ];
    // Up 2x (an FPN's), up 4x and down 2x, odd sizes, up 1.5x across, one row to three;
    // and a plane of three bands of rows (see `UNIT_VALUES`).
    let resizes = [
        ([1, 1, 25, 64], [50, 128]),
        ([2, 3, 5, 7], [10, 14]),
        ([1, 2, 3, 4], [12, 16]),
        ([1, 2, 8, 6], [4, 3]),
        ([1, 1, 4, 6], [4, 9]),
        ([1, 2, 1, 5], [3, 5]),
    ];
    for (x_shape, [output_height, output_width]) in resizes {
        let out = [x_shape[0], x_shape[1], output_height, output_width];
        let x = values(x_shape.iter().product());
        let shape = |dims: [usize; 4]| dims.map(|dim| dim as i64);
        for &(code, _, onnx) in &modes {
            for &(rounding, nearest) in &roundings {
                let expected = onnx_reference(&x, x_shape, out, Mode::Nearest, onnx, nearest);
                let got = run(&x, &shape(x_shape), [0, code, rounding], &shape(out)).unwrap();
                assert_eq!(
                    got, expected,
                    "nearest {x_shape:?} -> {out:?}, {onnx:?} {nearest:?}"
                );
            }
            let expected = onnx_reference(&x, x_shape, out, Mode::Linear, onnx, Nearest::Floor);
            let got = run(&x, &shape(x_shape), [1, code, 0], &shape(out)).unwrap();
            for (index, (got, expected)) in got.iter().zip(&expected).enumerate() {
                // The coordinates in float32 (as TVM computes them), the reference's in f64:
                // the inputs are within ±8.
                assert!(
                    (got - expected).abs() <= 1e-4,
                    "linear {x_shape:?} -> {out:?}, {onnx:?}, value {index}: {got} vs {expected}"
                );
            }
        }
    }
}

#[test]
fn tvm_s_own_modes_sample_where_it_does() {
    let x = [0.0, 1.0, 2.0, 3.0];
    // Half-pixel bilinear 2x2 -> 4x4 (PyTorch's align_corners=False).
    let bilinear = run(&x, &[1, 1, 2, 2], [1, 0, 0], &[1, 1, 4, 4]).unwrap();
    let row = |top: f32| [top, top + 0.25, top + 0.75, top + 1.0];
    let expected: Vec<f32> = [0.0, 0.5, 1.5, 2.0].into_iter().flat_map(row).collect();
    assert_eq!(bilinear, expected);
    // Round (half to even) on asymmetric 1 -> 4 of 2 columns: coordinates 0, 0.5, 1, 1.5.
    let round = run(&[5.0, 6.0], &[1, 1, 1, 2], [0, 2, 0], &[1, 1, 1, 4]).unwrap();
    assert_eq!(round, [5.0, 5.0, 6.0, 6.0]);
    // tf_half_pixel_for_nn, floor, 2 -> 4: coordinates 0.25, 0.75, 1.25, 1.75.
    let tf = run(&[5.0, 6.0], &[1, 1, 1, 2], [0, 4, 1], &[1, 1, 1, 4]).unwrap();
    assert_eq!(tf, [5.0, 5.0, 6.0, 6.0]);
}

#[test]
fn blocked_tensors_resize_as_their_channels_do() {
    let (channels, height, width) = (32usize, 3usize, 5usize);
    let x = values(channels * height * width);
    // Blocks of 16 channels (the layout relax-build gives CNNs), and of 4.
    for lanes in [16usize, 4] {
        // Channel c of pixel (y, x) at ((c / lanes * H + y) * W + x) * lanes + c % lanes.
        let mut blocked = vec![0.0; x.len()];
        for (index, value) in x.iter().enumerate() {
            let (c, pixel) = (index / (height * width), index % (height * width));
            blocked[((c / lanes) * height * width + pixel) * lanes + c % lanes] = *value;
        }
        let blocks = (channels / lanes) as i64;
        for codes in [[0, 2, 1], [1, 0, 0], [1, 1, 0]] {
            let nchw = run(&x, &[1, 32, 3, 5], codes, &[1, 32, 7, 4]).unwrap();
            let shape = [1, blocks, 3, 5, lanes as i64];
            let got = run(&blocked, &shape, codes, &[1, blocks, 7, 4, lanes as i64]).unwrap();
            for (index, value) in nchw.iter().enumerate() {
                let (c, pixel) = (index / 28, index % 28);
                let at = ((c / lanes) * 28 + pixel) * lanes + c % lanes;
                assert_eq!(got[at], *value, "{lanes} lanes, {codes:?}");
            }
        }
    }
}

#[test]
fn arguments_that_do_not_fit_are_refused() {
    let x = vec![0.0; 2 * 3 * 4];
    for (shape, codes, out_shape, expected) in [
        (
            vec![1, 2, 3, 4],
            [2, 0, 0],
            vec![1, 2, 6, 8],
            "method 2 is not one of 0..2",
        ),
        (
            vec![1, 2, 3, 4],
            [0, 5, 0],
            vec![1, 2, 6, 8],
            "coordinates 5",
        ),
        (
            vec![1, 2, 3, 4],
            [0, 0, -1],
            vec![1, 2, 6, 8],
            "rounding -1",
        ),
        (
            vec![1, 2, 3, 4],
            [0, 0, 0],
            vec![1, 3, 6, 8],
            "the same N and C",
        ),
        (
            vec![1, 2, 3, 4],
            [0, 0, 0],
            vec![1, 2, 6, 8, 1],
            "the same N and C",
        ),
        (vec![2, 3, 4], [0, 0, 0], vec![2, 6, 8], "[N, C, H, W]"),
        (
            vec![1, 1, 3, 4, 2],
            [0, 0, 0],
            vec![1, 1, 6, 8, 3],
            "the same N and C",
        ),
    ] {
        let error = run(&x, &shape, codes, &out_shape).unwrap_err();
        assert!(error.contains(expected), "{shape:?} {codes:?}: {error}");
    }
    let error = run(&[], &[1, 24, 0, 1], [0, 0, 0], &[1, 24, 2, 2]).unwrap_err();
    assert!(error.contains("has no pixel"), "{error}");
    // An empty output is nothing to do.
    assert_eq!(run(&x, &[1, 2, 3, 4], [0, 0, 0], &[1, 2, 0, 8]), Ok(vec![]));
}
