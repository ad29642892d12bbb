//! Convolutions against naive loops, split over three OS threads.

use super::*;
use crate::kernels::parallel::three_threads;

fn values(count: usize, seed: u64) -> Vec<f32> {
    crate::kernels::parallel::test_values(count, seed, 1.0)
}

fn naive(shape: &Conv2d, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    // (`bias` is folded in by the caller in these tests; kept for the plain case.)
    let (oh, ow) = shape.output().unwrap();
    let (filters, channels) = (shape.filters / shape.groups, shape.channels / shape.groups);
    let mut out = vec![0f32; shape.batch * shape.filters * oh * ow];
    for n in 0..shape.batch {
        for o in 0..shape.filters {
            let group = o / filters;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut sum = bias.map_or(0.0, |bias| bias[o] as f64);
                    for c in 0..channels {
                        for ky in 0..shape.kernel.0 {
                            for kx in 0..shape.kernel.1 {
                                let y = (oy * shape.stride.0 + ky * shape.dilation.0) as isize
                                    - shape.padding.0 as isize;
                                let xx = (ox * shape.stride.1 + kx * shape.dilation.1) as isize
                                    - shape.padding.1 as isize;
                                if y < 0
                                    || xx < 0
                                    || y as usize >= shape.height
                                    || xx as usize >= shape.width
                                {
                                    continue;
                                }
                                let input = x[((n * shape.channels + group * channels + c)
                                    * shape.height
                                    + y as usize)
                                    * shape.width
                                    + xx as usize];
                                let weight = w[((o * channels + c) * shape.kernel.0 + ky)
                                    * shape.kernel.1
                                    + kx];
                                sum += input as f64 * weight as f64;
                            }
                        }
                    }
                    out[((n * shape.filters + o) * oh + oy) * ow + ox] = sum as f32;
                }
            }
        }
    }
    out
}

fn assert_close(actual: &[f32], expected: &[f32], what: &str) {
    for (index, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (a - e).abs() <= 1e-4 * (1.0 + e.abs()),
            "{what}[{index}]: {a} vs {e}"
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn shape(
    channels: usize,
    size: usize,
    filters: usize,
    kernel: usize,
    stride: usize,
    pad: usize,
    dilation: usize,
    groups: usize,
) -> Conv2d {
    Conv2d {
        batch: 2,
        channels,
        height: size,
        width: size + 1,
        filters,
        kernel: (kernel, kernel),
        stride: (stride, stride),
        padding: (pad, pad, pad, pad),
        dilation: (dilation, dilation),
        groups,
    }
}

#[test]
fn convolutions_match_naive_loops() {
    let cases = [
        shape(3, 20, 8, 7, 2, 3, 1, 1),   // a ResNet stem
        shape(16, 12, 16, 3, 1, 1, 1, 1), // 3x3 same padding
        shape(16, 12, 32, 1, 1, 0, 1, 1), // pointwise: no unfolding
        shape(16, 12, 8, 1, 2, 0, 1, 1),  // strided 1x1
        shape(8, 9, 8, 3, 1, 2, 2, 2),    // dilated, two groups
        shape(4, 3, 70, 3, 1, 1, 1, 1),   // few pixels, many filters: split by filters
        shape(128, 20, 4, 3, 1, 1, 1, 1), // deep patches: several unfolded blocks per task
        shape(64, 24, 4, 3, 1, 1, 1, 1),  // 600 pixels: split by pixels, 3 blocks per task
        shape(8, 24, 8, 1, 1, 0, 1, 1),   // pointwise, split by pixels (320 + 280)
        shape(5, 17, 6, 3, 3, 4, 1, 1),   // stride 3 with padding wider than a stride
    ];
    for case in cases {
        let (oh, ow) = case.output().unwrap();
        let x = values(case.batch * case.channels * case.height * case.width, 1);
        let w = values(
            case.filters * case.channels / case.groups * case.kernel.0 * case.kernel.1,
            2,
        );
        let bias = values(case.filters, 3);
        let scale = values(case.filters, 4);
        let residual = values(case.batch * case.filters * oh * ow, 5);
        for (with_bias, with_scale, with_residual, epilogue) in [
            (false, false, false, Epilogue::None),
            (true, false, false, Epilogue::Relu),
            (true, true, false, Epilogue::None),
            (true, true, true, Epilogue::Relu),
            (false, false, true, Epilogue::None),
        ] {
            let mut expected = naive(&case, &x, &w, None);
            let pixels = oh * ow;
            for (index, value) in expected.iter_mut().enumerate() {
                let filter = (index / pixels) % case.filters;
                if with_scale {
                    *value *= scale[filter];
                }
                if with_bias {
                    *value += bias[filter];
                }
                if with_residual {
                    *value += residual[index];
                }
            }
            epilogue.apply(&mut expected);
            let per_filter = with_bias.then_some(PerFilter {
                scale: with_scale.then_some(scale.as_slice()),
                shift: &bias,
            });
            let residual = with_residual.then_some(residual.as_ptr());
            // im2col (or the direct 1x1 path), and Winograd where it applies, with the
            // kernel in Winograd form.
            let winograd_fits = case.kernel == (3, 3)
                && (case.stride, case.dilation, case.groups) == ((1, 1), (1, 1), 1);
            let mut algorithms = vec![(Algorithm::Unfolded, w.clone())];
            if winograd_fits {
                for tile in [Tile::Two, Tile::Four] {
                    let u = crate::kernels::winograd_weights(&w, case.filters, case.channels, tile);
                    algorithms.push((Algorithm::Winograd(tile), u));
                }
            }
            for (algorithm, weights) in algorithms {
                let mut out = vec![f32::NAN; case.batch * case.filters * oh * ow];
                // SAFETY: the buffers have the sizes `case` describes.
                unsafe {
                    algorithm
                        .convolve(
                            &case,
                            x.as_ptr(),
                            weights.as_ptr(),
                            per_filter,
                            residual,
                            epilogue,
                            Shared(out.as_mut_ptr()),
                            three_threads,
                        )
                        .unwrap()
                };
                assert_close(
                    &out,
                    &expected,
                    &format!("{algorithm:?} {case:?} {epilogue:?}"),
                );
            }
        }
    }
}

#[test]
fn copied_rows_match_a_per_pixel_copy() {
    let source: Vec<f32> = (1..=7).map(|value| value as f32).collect();
    for x0 in -9..10isize {
        for stride in 1..4 {
            for first in 0..4 {
                for length in 0..6 {
                    let mut run = vec![f32::NAN; length];
                    copy_row(&source, x0, stride, first, &mut run);
                    let expected: Vec<f32> = (first..first + length)
                        .map(|ox| {
                            let x = x0 + (ox * stride) as isize;
                            if (0..7).contains(&x) {
                                source[x as usize]
                            } else {
                                0.0
                            }
                        })
                        .collect();
                    assert_eq!(run, expected, "x0 {x0} stride {stride} first {first}");
                }
            }
        }
    }
}

#[test]
fn a_kernel_larger_than_the_padded_input_has_no_output() {
    assert_eq!(shape(1, 2, 1, 5, 1, 0, 1, 1).output(), None);
    assert_eq!(shape(1, 224, 1, 7, 2, 3, 1, 1).output(), Some((112, 113)));
}
