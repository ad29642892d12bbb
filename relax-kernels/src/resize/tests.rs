//! Resize through the kernel's arguments, against direct two-dimensional loops.

use super::*;
use crate::parallel::inline;
use crate::tensor::Argument;

fn values(count: usize, seed: u64) -> Vec<f32> {
    crate::parallel::test_values(count, seed, 4.0)
}

/// Per axis: (listed, scale or size, roi start, roi end).
fn sizing(per_axis: &[(bool, f64)]) -> Vec<f32> {
    per_axis
        .iter()
        .flat_map(|&(listed, value)| [f32::from(u8::from(listed)), value as f32, 0.0, 1.0])
        .collect()
}

/// Calls the kernel: (mode, coordinates, nearest) numbered as the module says.
#[allow(clippy::too_many_arguments)]
fn call(
    x: &[f32],
    shape: &[i64],
    sizing: &[f32],
    out_shape: &[i64],
    by_sizes: i64,
    policy: i64,
    enums: (i64, i64, i64),
    cubic_a: f64,
    antialias: i64,
) -> Result<Vec<f32>, String> {
    let count = out_shape.iter().product::<i64>() as usize;
    let mut out = vec![f32::NAN; count];
    let sizing_shape = [sizing.len() as i64];
    let args = [
        Argument::input(x, shape)?,
        Argument::input(sizing, &sizing_shape)?,
        Argument::int(by_sizes),
        Argument::int(policy),
        Argument::int(enums.0),
        Argument::int(enums.1),
        Argument::int(enums.2),
        Argument::float(cubic_a),
        Argument::int(0),
        Argument::float(0.0),
        Argument::int(antialias),
        Argument::output(&mut out, out_shape)?,
    ];
    resize(&Arguments::new("relax_runtime.resize", &args, inline))?;
    Ok(out)
}

fn assert_close(actual: &[f32], expected: &[f64], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}");
    for (index, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (f64::from(a) - e).abs() <= 1e-5 * (1.0 + e.abs()),
            "{what}[{index}]: {a} vs {e}"
        );
    }
}

/// Bilinear with half_pixel coordinates, written out: each output pixel from its four
/// neighbours, the coordinates clamped to the edges.
fn bilinear_half_pixel(x: &[f32], h: usize, w: usize, oh: usize, ow: usize) -> Vec<f64> {
    let (sh, sw) = (oh as f64 / h as f64, ow as f64 / w as f64);
    let mut out = Vec::new();
    for plane in x.chunks_exact(h * w) {
        for i in 0..oh {
            let y = ((i as f64 + 0.5) / sh - 0.5).clamp(0.0, (h - 1) as f64);
            let (y0, fy) = (y.floor() as usize, y - y.floor());
            let y1 = (y0 + 1).min(h - 1);
            for j in 0..ow {
                let c = ((j as f64 + 0.5) / sw - 0.5).clamp(0.0, (w - 1) as f64);
                let (x0, fx) = (c.floor() as usize, c - c.floor());
                let x1 = (x0 + 1).min(w - 1);
                let at = |r: usize, k: usize| f64::from(plane[r * w + k]);
                out.push(
                    (1.0 - fy) * ((1.0 - fx) * at(y0, x0) + fx * at(y0, x1))
                        + fy * ((1.0 - fx) * at(y1, x0) + fx * at(y1, x1)),
                );
            }
        }
    }
    out
}

#[test]
fn bilinear_by_sizes_matches_the_direct_loops_at_odd_sizes() {
    for (h, w, oh, ow) in [(5, 7, 11, 3), (4, 4, 8, 8), (9, 2, 4, 13), (1, 3, 2, 5)] {
        let x = values(2 * 3 * h * w, (h * 10 + w) as u64);
        let shape = [2, 3, h as i64, w as i64];
        let per_axis = [
            (false, 2.0),
            (false, 3.0),
            (true, oh as f64),
            (true, ow as f64),
        ];
        let out = call(
            &x,
            &shape,
            &sizing(&per_axis),
            &[2, 3, oh as i64, ow as i64],
            1,
            0,
            (1, 0, 0),
            -0.75,
            0,
        )
        .unwrap();
        assert_close(
            &out,
            &bilinear_half_pixel(&x, h, w, oh, ow),
            &format!("{h}x{w} -> {oh}x{ow}"),
        );
    }
}

#[test]
fn nearest_asymmetric_floor_by_scales_reads_the_input_index_below() {
    let (h, w) = (3, 5);
    let x = values(h * w, 7);
    let (sh, sw) = (2.5f64, 0.6f64);
    let (oh, ow) = (
        (h as f64 * sh).floor() as usize,
        (w as f64 * sw).floor() as usize,
    );
    let out = call(
        &x,
        &[1, 1, h as i64, w as i64],
        &sizing(&[(true, 1.0), (true, 1.0), (true, sh), (true, sw)]),
        &[1, 1, oh as i64, ow as i64],
        0,
        0,
        (0, 4, 2),
        -0.75,
        0,
    )
    .unwrap();
    let mut expected = Vec::new();
    for i in 0..oh {
        for j in 0..ow {
            let (r, c) = (
                (i as f64 / sh).floor() as usize,
                (j as f64 / sw).floor() as usize,
            );
            expected.push(f64::from(x[r.min(h - 1) * w + c.min(w - 1)]));
        }
    }
    assert_close(&out, &expected, "nearest");
}

#[test]
fn cubic_align_corners_matches_the_keys_kernel_on_one_axis() {
    let (w, ow, a) = (6usize, 9usize, -0.5);
    let x = values(w, 3);
    let out = call(
        &x,
        &[1, w as i64],
        &sizing(&[(false, 1.0), (true, ow as f64)]),
        &[1, ow as i64],
        1,
        0,
        (2, 3, 0),
        a,
        0,
    )
    .unwrap();
    let expected: Vec<f64> = (0..ow)
        .map(|j| {
            let c = j as f64 * (w - 1) as f64 / (ow - 1) as f64;
            let base = c.floor() as i64;
            (base - 1..=base + 2)
                .map(|tap| {
                    let index = tap.clamp(0, w as i64 - 1) as usize;
                    cubic(tap as f64 - c, a) * f64::from(x[index])
                })
                .sum()
        })
        .collect();
    assert_close(&out, &expected, "cubic");
}

#[test]
fn antialiased_linear_downsampling_averages_over_the_wider_support() {
    // Halving a row with antialias: triangle weights over 4 inputs, normalized.
    let x: Vec<f32> = (0..8).map(|v| v as f32).collect();
    let out = call(
        &x,
        &[8],
        &sizing(&[(true, 0.5)]),
        &[4],
        0,
        0,
        (1, 0, 0),
        -0.75,
        1,
    )
    .unwrap();
    let mut expected = Vec::new();
    for j in 0..4 {
        let c = (j as f64 + 0.5) / 0.5 - 0.5;
        let taps: Vec<(f64, f64)> = (-2..=10)
            .map(|tap| (tap as f64, (1.0 - ((tap as f64 - c) * 0.5).abs()).max(0.0)))
            .collect();
        let total: f64 = taps.iter().map(|t| t.1).sum();
        expected.push(
            taps.iter()
                .map(|&(tap, weight)| weight / total * tap.clamp(0.0, 7.0))
                .sum(),
        );
    }
    assert_close(&out, &expected, "antialias");
}

#[test]
fn keep_aspect_ratio_policies_scale_every_listed_axis_alike() {
    let axes = |h, w| {
        [
            Axis {
                input: 4,
                listed: true,
                value: h,
                roi: (0.0, 1.0),
            },
            Axis {
                input: 6,
                listed: true,
                value: w,
                roi: (0.0, 1.0),
            },
        ]
    };
    let sizes = |policy| output_sizes(&axes(2.0, 6.0), true, policy).unwrap();
    assert_eq!(sizes(Policy::Stretch), vec![(2, 0.5), (6, 1.0)]);
    assert_eq!(sizes(Policy::NotLarger), vec![(2, 0.5), (3, 0.5)]);
    assert_eq!(sizes(Policy::NotSmaller), vec![(4, 1.0), (6, 1.0)]);
    assert!(output_sizes(&axes(-1.0, 2.0), false, Policy::Stretch).is_err());
    assert!(output_sizes(&axes(f64::NAN, 2.0), true, Policy::Stretch).is_err());
}

#[test]
fn tf_crop_and_resize_fills_outside_the_input_with_the_extrapolation_value() {
    let settings = Settings {
        mode: Mode::Linear,
        coordinates: Coordinates::TfCropAndResize,
        nearest: Nearest::RoundPreferFloor,
        cubic_a: -0.75,
        exclude_outside: false,
        extrapolation: 10.0,
        antialias: false,
    };
    let taps = axis_taps(4, 3, 0.75, (0.5, 1.5), &settings);
    // Coordinates 1.5, 3.0 and 4.5: the last is past the input.
    assert_eq!(taps[0], Taps::Weighted(vec![(1, 0.5), (2, 0.5)]));
    assert_eq!(taps[1], Taps::Weighted(vec![(3, 1.0)]));
    assert_eq!(taps[2], Taps::Outside);
}

#[test]
fn arguments_that_do_not_fit_are_refused() {
    let x = values(12, 1);
    let good = sizing(&[(true, 2.0), (true, 0.5)]);
    let shape = [3, 4];
    let run = |sizing: &[f32], out_shape: &[i64], enums| {
        call(&x, &shape, sizing, out_shape, 0, 0, enums, -0.75, 0)
    };
    assert!(run(&good, &[6, 2], (1, 0, 0)).is_ok());
    let wrong_shape = run(&good, &[6, 3], (1, 0, 0)).unwrap_err();
    assert!(wrong_shape.contains("resizes to [6, 2]"), "{wrong_shape}");
    assert!(run(&good[..4], &[6, 2], (1, 0, 0))
        .unwrap_err()
        .contains("4 per axis"));
    assert!(run(&good, &[6, 2], (3, 0, 0))
        .unwrap_err()
        .contains("mode 3"));
    assert!(run(&good, &[6, 2], (1, 6, 0))
        .unwrap_err()
        .contains("coordinate mode 6"));
    let zero_scale = sizing(&[(true, 0.0), (true, 1.0)]);
    assert!(run(&zero_scale, &[0, 4], (1, 0, 0))
        .unwrap_err()
        .contains("not positive"));
    // Resizing to an empty axis gives an empty output.
    let to_empty = sizing(&[(true, 0.2), (true, 1.0)]);
    assert_eq!(
        run(&to_empty, &[0, 4], (1, 0, 0)).unwrap(),
        Vec::<f32>::new()
    );
}
