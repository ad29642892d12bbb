//! Row kernels against double-precision loops, split over three OS threads.

use super::*;
use crate::parallel::three_threads;

fn values(count: usize, seed: u64) -> Vec<f32> {
    crate::parallel::test_values(count, seed, 8.0)
}

fn softmax_reference(row: &[f64]) -> Vec<f64> {
    let top = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = row.iter().map(|v| (v - top).exp()).collect();
    let total: f64 = exps.iter().sum();
    exps.iter().map(|e| e / total).collect()
}

#[test]
fn softmax_with_a_broadcast_mask_matches_double_precision() {
    let shape = [2i64, 3, 5, 37];
    let mask_shape = [2i64, 1, 1, 37];
    let (rows, width) = (2 * 3 * 5, 37);
    let x = values(rows * width, 1);
    let mut mask = values(2 * width, 2);
    mask[3] = -3.4e38; // a masked position, as exporters write it
    for with_mask in [false, true] {
        let mut out = vec![f32::NAN; rows * width];
        let view = View::of(x.as_ptr().cast_mut(), &shape);
        let mask_view = View::of(mask.as_ptr().cast_mut(), &mask_shape);
        let mask_rows = MaskRows::new(&view, &mask_view).unwrap();
        let mask_arg = with_mask.then_some((mask.as_ptr(), &mask_rows));
        // SAFETY: the buffers have the sizes passed.
        unsafe {
            softmax_into(
                rows,
                width,
                x.as_ptr(),
                mask_arg,
                Shared(out.as_mut_ptr()),
                three_threads,
            )
            .unwrap()
        };
        for row in 0..rows {
            let batch = row / 15;
            let input: Vec<f64> = (0..width)
                .map(|i| {
                    x[row * width + i] as f64
                        + if with_mask {
                            mask[batch * width + i] as f64
                        } else {
                            0.0
                        }
                })
                .collect();
            for (i, expected) in softmax_reference(&input).iter().enumerate() {
                let actual = out[row * width + i] as f64;
                assert!(
                    (actual - expected).abs() <= 1e-6 * (1.0 + expected),
                    "row {row}[{i}]: {actual} vs {expected}"
                );
            }
        }
    }
}

#[test]
fn a_mask_that_does_not_broadcast_is_refused() {
    let x = [0f32; 12];
    let view = View::of(x.as_ptr().cast_mut(), &[3, 4]);
    for shape in [&[2i64, 4][..], &[3, 1], &[4]] {
        let mask = View::of(x.as_ptr().cast_mut(), shape);
        assert!(MaskRows::new(&view, &mask).is_none(), "{shape:?}");
    }
}

#[test]
fn layer_norm_matches_double_precision() {
    for (rows, width) in [(7, 384), (3, 5), (1, 1)] {
        let x = values(rows * width, 3);
        let gamma = values(width, 4);
        let beta = values(width, 5);
        let mut out = vec![f32::NAN; rows * width];
        // SAFETY: the buffers have the sizes passed.
        unsafe {
            layer_norm_into(
                rows,
                width,
                x.as_ptr(),
                &gamma,
                &beta,
                1e-12,
                Shared(out.as_mut_ptr()),
                three_threads,
            )
            .unwrap()
        };
        for row in 0..rows {
            let input: Vec<f64> = x[row * width..(row + 1) * width]
                .iter()
                .map(|&v| v as f64)
                .collect();
            let mean = input.iter().sum::<f64>() / width as f64;
            let variance =
                input.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / width as f64;
            for i in 0..width {
                let expected = (input[i] - mean) / (variance + 1e-12).sqrt() * gamma[i] as f64
                    + beta[i] as f64;
                let actual = out[row * width + i] as f64;
                assert!(
                    (actual - expected).abs() <= 1e-4 * (1.0 + expected.abs()),
                    "{rows}x{width} row {row}[{i}]: {actual} vs {expected}"
                );
            }
        }
    }
}

#[test]
fn row_sums_and_means_match_double_precision() {
    let (rows, width) = (5, 1000);
    let x = values(rows * width, 6);
    for (scale, what) in [(1.0f32, "sum"), (1.0 / width as f32, "mean")] {
        let mut out = vec![f32::NAN; rows];
        sum_rows(&x, width, scale, &mut out);
        for row in 0..rows {
            let expected: f64 = x[row * width..(row + 1) * width]
                .iter()
                .map(|&v| v as f64)
                .sum::<f64>()
                * scale as f64;
            assert!(
                (out[row] as f64 - expected).abs() <= 1e-4 * (1.0 + expected.abs()),
                "{what} row {row}"
            );
        }
    }
}

#[test]
fn row_maxima_and_minima_match_the_rows() {
    let (rows, width) = (7, 37);
    let x = values(rows * width, 7);
    let mut maxima = vec![f32::NAN; rows];
    let mut minima = vec![f32::NAN; rows];
    max_rows(&x, width, &mut maxima);
    min_rows(&x, width, &mut minima);
    for row in 0..rows {
        let values = &x[row * width..(row + 1) * width];
        assert_eq!(
            maxima[row],
            values.iter().copied().fold(f32::NEG_INFINITY, f32::max),
            "row {row}"
        );
        assert_eq!(
            minima[row],
            values.iter().copied().fold(f32::INFINITY, f32::min),
            "row {row}"
        );
    }
}

#[test]
fn reduction_kinds_are_the_documented_codes() {
    assert_eq!(Reduction::from_code(0), Some(Reduction::Sum));
    assert_eq!(Reduction::from_code(1), Some(Reduction::Mean));
    assert_eq!(Reduction::from_code(2), Some(Reduction::Max));
    assert_eq!(Reduction::from_code(3), Some(Reduction::Min));
    assert_eq!(Reduction::from_code(4), None);
}
