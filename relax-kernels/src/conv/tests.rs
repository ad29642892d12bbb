//! Convolutions against naive loops, split over three OS threads.

use super::*;
use crate::parallel::three_threads;
use crate::tensor::Argument;

fn values(count: usize, seed: u64) -> Vec<f32> {
    crate::parallel::test_values(count, seed, 1.0)
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
    assert_close_within(actual, expected, 0.0, what);
}

/// As [`assert_close`], with `rounding` more absolute error allowed.
fn assert_close_within(actual: &[f32], expected: &[f32], rounding: f32, what: &str) {
    for (index, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (a - e).abs() <= 1e-4 * (1.0 + e.abs()) + rounding,
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
        shape(3, 20, 8, 7, 2, 3, 1, 1),    // a ResNet stem
        shape(16, 12, 16, 3, 1, 1, 1, 1),  // 3x3 same padding
        shape(16, 12, 32, 1, 1, 0, 1, 1),  // pointwise: no unfolding
        shape(16, 12, 8, 1, 2, 0, 1, 1),   // strided 1x1
        shape(8, 9, 8, 3, 1, 2, 2, 2),     // dilated, two groups
        shape(4, 3, 70, 3, 1, 1, 1, 1),    // few pixels, many filters: split by filters
        shape(5, 7, 130, 3, 1, 1, 1, 1),   // a 7x8 plane, 3 filter panels (the last of 2)
        shape(9, 6, 200, 1, 1, 0, 1, 1),   // pointwise on a 6x7 plane, 4 filter panels
        shape(7, 13, 150, 1, 2, 0, 1, 1),  // strided 1x1 onto a 7x7 plane
        shape(128, 20, 4, 3, 1, 1, 1, 1),  // deep patches: several unfolded blocks per task
        shape(64, 24, 4, 3, 1, 1, 1, 1),   // 600 pixels: split by pixels, 3 blocks per task
        shape(8, 24, 8, 1, 1, 0, 1, 1),    // pointwise, split by pixels (320 + 280)
        shape(5, 17, 6, 3, 3, 4, 1, 1),    // stride 3 with padding wider than a stride
        shape(24, 14, 24, 3, 1, 1, 1, 24), // depthwise 3x3
        shape(24, 14, 24, 3, 2, 1, 1, 24), // depthwise, stride 2 (MobileNet's downsampling)
        shape(8, 9, 16, 5, 1, 4, 2, 8),    // depthwise, multiplier 2, dilated, wide padding
        shape(40, 40, 40, 3, 1, 1, 1, 40), // depthwise, enough work for three tasks
        shape(8, 11, 8, 3, 2, 2, 2, 8),    // depthwise, stride 2, dilated, padding 2
        shape(6, 23, 12, 3, 3, 1, 1, 6),   // depthwise, stride 3, multiplier 2, rows over 16
        // Depthwise with stride 2 and TensorFlow's "SAME" padding (bottom and right only),
        // 5x5 (EfficientNet's), on rows of 2 runs and a partial one.
        Conv2d {
            padding: (0, 0, 1, 1),
            ..shape(4, 18, 4, 3, 2, 0, 1, 4)
        },
        // Stride 2 on even planes, unfolded from phase planes: a 7x7 stem, a 3x3 layer,
        // TensorFlow's "SAME" padding (bottom and right only), two groups.
        Conv2d {
            width: 20,
            ..shape(3, 20, 8, 7, 2, 3, 1, 1)
        },
        Conv2d {
            width: 12,
            ..shape(16, 12, 16, 3, 2, 1, 1, 1)
        },
        Conv2d {
            padding: (0, 0, 1, 1),
            width: 18,
            ..shape(4, 18, 6, 3, 2, 0, 1, 1)
        },
        Conv2d {
            width: 10,
            ..shape(8, 10, 8, 3, 2, 1, 1, 2)
        },
        // An empty input plane: its output is all padding.
        Conv2d {
            height: 0,
            width: 4,
            padding: (2, 1, 2, 1),
            ..shape(2, 4, 3, 3, 2, 0, 1, 1)
        },
        // Stride 1 with the output as wide as the input (unfolded as shifted planes), one
        // row taller (more padding on top), a 5x5 kernel over a plane only 4 rows high
        // (shifts past whole rows), and 3 filter panels.
        Conv2d {
            padding: (2, 1, 1, 1),
            ..shape(6, 9, 8, 3, 1, 0, 1, 1)
        },
        Conv2d {
            height: 4,
            ..shape(5, 11, 7, 5, 1, 2, 1, 1)
        },
        Conv2d {
            height: 6,
            ..shape(3, 6, 130, 3, 1, 1, 1, 1)
        },
        Conv2d {
            padding: (1, 2, 2, 1),
            ..shape(4, 70, 4, 5, 2, 0, 1, 4)
        },
        // Stems summed directly: 3x3/2 onto 13 filters (a partial tile of 8), one input
        // channel over rows of 40 (a run of 32 and a partial one), four channels with a
        // dilated 3x3 and wide padding, stride 3, and a 1x1 and a 7x7 at stride 1.
        shape(3, 37, 13, 3, 2, 1, 1, 1),
        shape(1, 40, 8, 3, 1, 1, 1, 1),
        shape(4, 21, 9, 3, 1, 3, 2, 1),
        shape(3, 50, 16, 5, 3, 2, 1, 1),
        shape(2, 33, 3, 1, 1, 0, 1, 1),
        Conv2d {
            padding: (3, 1, 2, 4),
            ..shape(3, 30, 17, 7, 1, 0, 1, 1)
        },
        // Onto a few pixels (dot products): a short window's STFT, 16 taps at stride 8
        // onto 4 pixels and a partial tile of filters; a 3-tap row with padding; a
        // 3x3 kernel onto one pixel; 9 pixels (runs of 4, 4 and 1) with dilation.
        Conv2d {
            height: 1,
            kernel: (1, 16),
            stride: (1, 8),
            ..shape(3, 40, 6, 1, 1, 0, 1, 1)
        },
        Conv2d {
            height: 1,
            kernel: (1, 3),
            padding: (0, 1, 0, 1),
            ..shape(7, 4, 5, 1, 1, 0, 1, 1)
        },
        shape(13, 3, 9, 3, 1, 0, 1, 1),
        shape(5, 7, 7, 3, 2, 1, 2, 1),
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
            (true, true, true, Epilogue::Gelu),
            (true, true, false, Epilogue::Silu),
            (true, false, false, Epilogue::Relu6),
            (true, true, true, Epilogue::HardSwish),
            (true, false, false, Epilogue::HardSigmoid),
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
            // im2col (or the direct 1x1 path), filter panels (one group) and Winograd
            // where it applies, with the kernel packed or in Winograd form.
            let winograd_fits = case.kernel == (3, 3)
                && (case.stride, case.dilation, case.groups) == ((1, 1), (1, 1), 1);
            let mut algorithms = vec![(Algorithm::Unfolded, w.clone())];
            if case.channels == case.groups {
                for isa in Isa::available() {
                    algorithms.push((Algorithm::Depthwise(isa), w.clone()));
                }
            }
            if case.groups == 1 && case.channels > 0 {
                // The direct sums, whether or not `direct::computes` would take the case.
                for isa in Isa::available() {
                    algorithms.push((
                        Algorithm::Direct {
                            blocked: false,
                            isa,
                        },
                        w.clone(),
                    ));
                }
            }
            if case.groups == 1 && case.channels > 0 {
                // The dot products, whether or not `dots::computes` would take the case.
                algorithms.push((Algorithm::Dots, w.clone()));
            }
            if case.groups == 1 {
                let depth = case.channels * case.kernel.0 * case.kernel.1;
                let panels =
                    crate::weights::pack_panels(depth, case.filters, |k, f| w[f * depth + k]);
                algorithms.push((Algorithm::FilterPanels, panels));
            }
            if winograd_fits {
                for tile in [Tile::Two, Tile::Four] {
                    let u = crate::weights::winograd(&w, case.filters, case.channels, tile);
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
                            Operands {
                                x: x.as_ptr(),
                                w: weights.as_ptr(),
                                per_filter,
                                residual,
                                epilogue,
                                out: Shared(out.as_mut_ptr()),
                            },
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

/// `[N, C, H, W]` as `[N, ceil(C / 16), H, W, 16]`, zero-padded channels.
fn to_blocked(values: &[f32], batch: usize, channels: usize, plane: usize) -> Vec<f32> {
    let blocks = channels.div_ceil(BLOCK);
    let mut out = vec![0f32; batch * blocks * plane * BLOCK];
    for (index, value) in values.iter().enumerate() {
        let (n, c, p) = (
            index / (channels * plane),
            index / plane % channels,
            index % plane,
        );
        out[((n * blocks + c / BLOCK) * plane + p) * BLOCK + c % BLOCK] = *value;
    }
    out
}

#[test]
fn blocked_convolutions_match_naive_loops() {
    let cases = [
        shape(16, 12, 16, 3, 1, 1, 1, 1), // 3x3 same padding, one block
        shape(16, 12, 32, 1, 1, 0, 1, 1), // pointwise, read in place
        shape(32, 20, 16, 1, 1, 0, 1, 1), // 16 filters: tiles of consecutive pixels across rows
        shape(32, 14, 64, 1, 2, 0, 1, 1), // strided 1x1, read in place
        shape(32, 9, 80, 3, 2, 1, 1, 1),  // stride 2, a panel and a partial one (80)
        shape(48, 7, 144, 1, 1, 0, 1, 1), // 3 panels, the last of 16 filters
        shape(16, 11, 48, 3, 1, 2, 2, 1), // dilated, padding 2
        shape(80, 8, 32, 3, 1, 1, 1, 1),  // 5 blocks of channels: a tile resumes
        shape(16, 5, 16, 5, 3, 4, 1, 1),  // stride 3, padding wider than a stride
        Conv2d {
            padding: (0, 0, 1, 1), // TensorFlow's "SAME" (bottom and right only)
            ..shape(16, 10, 32, 3, 2, 0, 1, 1)
        },
    ];
    // From an NCHW input: a stem over 3 channels, 5 channels with padding.
    let from_nchw = [
        shape(3, 20, 16, 7, 2, 3, 1, 1),
        shape(5, 9, 32, 3, 1, 1, 1, 1),
    ];
    let all = cases
        .iter()
        .map(|case| (case, true))
        .chain(from_nchw.iter().map(|case| (case, false)));
    for (case, input_blocked) in all {
        let depth = case.channels * case.kernel.0 * case.kernel.1;
        check_blocked_algorithm(
            case,
            input_blocked,
            0.0,
            |w| crate::weights::pack_panels(depth, case.filters, |k, f| w[f * depth + k]),
            |isa| Algorithm::Blocked {
                input_blocked,
                arithmetic: Arithmetic::F32(isa),
            },
            &[
                (false, false, Epilogue::None),
                (true, true, Epilogue::Relu),
                (false, true, Epilogue::Relu6),
                (true, false, Epilogue::Silu),
                (true, true, Epilogue::HardSwish),
                (true, false, Epilogue::HardSigmoidSixth),
            ],
        );
    }
}

/// Checks `algorithm(isa)`, with portable and (where the CPU has them) AVX2 and AVX-512 tiles,
/// against naive loops on `case`: the kernel in the form `kernel_form` makes of the OIHW
/// one, the input blocked (or NCHW: `input_blocked`), the output and residual blocked, a
/// bias, and per `(scale, residual, epilogue)` of `finishes` a scale and a residual or not;
/// within `rounding` more absolute error than `assert_close` allows.
fn check_blocked_algorithm(
    case: &Conv2d,
    input_blocked: bool,
    rounding: f32,
    kernel_form: impl Fn(&[f32]) -> Vec<f32>,
    algorithm: impl Fn(Isa) -> Algorithm,
    finishes: &[(bool, bool, Epilogue)],
) {
    let (oh, ow) = case.output().unwrap();
    let (plane, pixels) = (case.height * case.width, oh * ow);
    let x = values(case.batch * case.channels * plane, 1);
    let w = values(
        case.filters * case.channels * case.kernel.0 * case.kernel.1,
        2,
    );
    let bias = values(case.filters, 3);
    let scale = values(case.filters, 4);
    let residual = values(case.batch * case.filters * pixels, 5);
    let kernel = kernel_form(&w);
    let input = if input_blocked {
        to_blocked(&x, case.batch, case.channels, plane)
    } else {
        x.clone()
    };
    let blocked_residual = to_blocked(&residual, case.batch, case.filters, pixels);
    for &(with_scale, with_residual, epilogue) in finishes {
        let mut expected = naive(case, &x, &w, None);
        for (index, value) in expected.iter_mut().enumerate() {
            let filter = (index / pixels) % case.filters;
            if with_scale {
                *value *= scale[filter];
            }
            *value += bias[filter];
            if with_residual {
                *value += residual[index];
            }
        }
        epilogue.apply(&mut expected);
        let expected = to_blocked(&expected, case.batch, case.filters, pixels);
        for isa in Isa::available() {
            let mut out = vec![f32::NAN; expected.len()];
            let algorithm = algorithm(isa);
            // SAFETY: the buffers have the sizes `case` describes.
            unsafe {
                algorithm
                    .convolve(
                        case,
                        Operands {
                            x: input.as_ptr(),
                            w: kernel.as_ptr(),
                            per_filter: Some(PerFilter {
                                scale: with_scale.then_some(scale.as_slice()),
                                shift: &bias,
                            }),
                            residual: with_residual.then_some(blocked_residual.as_ptr()),
                            epilogue,
                            out: Shared(out.as_mut_ptr()),
                        },
                        three_threads,
                    )
                    .unwrap()
            };
            assert_close_within(
                &out,
                &expected,
                rounding,
                &format!("{algorithm:?} {case:?} {epilogue:?}"),
            );
        }
    }
}

#[test]
fn direct_sums_onto_blocks_match_naive_loops() {
    let cases = [
        // 3x3/2 onto 2 blocks (a pair of blocks) over rows of 19: 12 + 7.
        shape(3, 37, 32, 3, 2, 1, 1, 1),
        // 7x7/2 onto 3 blocks (a pair and a last block of its own), rows of 20.
        shape(3, 40, 48, 7, 2, 3, 1, 1),
        // One channel onto one block, rows of 51: 4 tiles of 12 and 3 (AVX-512), 6s
        // elsewhere.
        shape(1, 50, 16, 3, 1, 1, 1, 1),
        // Four channels, dilated, padding 2, onto 4 blocks (two pairs).
        shape(4, 21, 64, 3, 1, 2, 2, 1),
        // Stride 3 with padding wider than a stride; a 1x1.
        shape(2, 26, 16, 5, 3, 4, 1, 1),
        shape(3, 17, 32, 1, 1, 0, 1, 1),
        // After a few NCHW layers: a 1x1 of 8 channels, a 3x3/2 of 15.
        shape(8, 30, 32, 1, 1, 0, 1, 1),
        shape(15, 20, 16, 3, 2, 1, 1, 1),
        // TensorFlow's "SAME" padding (bottom and right only), rows of 12: one tile
        // (AVX-512), two of 6 elsewhere.
        Conv2d {
            padding: (0, 0, 1, 1),
            width: 24,
            ..shape(3, 24, 32, 3, 2, 0, 1, 1)
        },
        // A keyword spotter's stem: 10x4/2 over 49x10 MFCCs onto rows of 5 (one narrow
        // run on AVX-512), and rows of 3.
        Conv2d {
            height: 49,
            width: 10,
            kernel: (10, 4),
            padding: (4, 1, 5, 1),
            ..shape(1, 49, 64, 1, 2, 0, 1, 1)
        },
        Conv2d {
            width: 6,
            ..shape(2, 9, 48, 3, 2, 1, 1, 1)
        },
    ];
    for case in &cases {
        check_blocked_algorithm(
            case,
            false,
            0.0,
            |w| w.to_vec(),
            |isa| Algorithm::Direct { blocked: true, isa },
            &[
                (false, false, Epilogue::None),
                (true, true, Epilogue::Relu),
                (false, true, Epilogue::Relu6),
                (true, false, Epilogue::Silu),
                (true, true, Epilogue::HardSwish),
                (false, false, Epilogue::Gelu),
                (true, false, Epilogue::HardSigmoidSixth),
            ],
        );
    }
}

#[test]
fn blocked_depthwise_convolutions_match_naive_loops() {
    let depthwise = |channels, size, kernel, stride, pad, dilation| {
        shape(
            channels, size, channels, kernel, stride, pad, dilation, channels,
        )
    };
    let cases = [
        depthwise(16, 12, 3, 1, 1, 1), // 3x3 same padding, 13 columns: 8 + 3 + edges
        depthwise(32, 20, 3, 1, 1, 1), // two blocks, rows of 21: two runs of 8
        depthwise(32, 9, 3, 2, 1, 1),  // stride 2
        depthwise(48, 7, 5, 1, 2, 1),  // 5x5 (EfficientNet), three blocks
        Conv2d {
            width: 41, // 5x5 at stride 2 (EfficientNet's downsampling): runs 8 + 8 + 3
            ..depthwise(16, 9, 5, 2, 2, 1)
        },
        depthwise(16, 11, 3, 1, 2, 2), // dilated, padding 2
        depthwise(16, 6, 3, 1, 2, 1),  // padding 2, undilated: runs reading only padding
        Conv2d {
            width: 3, // 5x5 over rows of 3: every run masked at both ends (AVX-512)
            ..depthwise(16, 4, 5, 1, 2, 1)
        },
        depthwise(16, 5, 5, 3, 4, 1), // stride 3, padding wider than a stride
        depthwise(16, 1, 3, 1, 1, 1), // a 1x2 plane: no interior column
        depthwise(16, 6, 1, 1, 0, 1), // 1x1
        Conv2d {
            width: 64, // bands of 4 rows (see `UNIT_WORK`): 4 + 4 + 3, runs 8 x 7 + 6
            ..depthwise(16, 11, 3, 1, 1, 1)
        },
        Conv2d {
            height: 40, // rows narrow enough to copy padded: bands of 17 rows, 17 + 17 + 6
            width: 14,
            ..depthwise(16, 14, 3, 1, 1, 1)
        },
        Conv2d {
            width: 30, // 5x5 over rows of 30 (4 edge pixels): copied, bands 3 x 6 + 2
            ..depthwise(32, 20, 5, 1, 2, 1)
        },
        Conv2d {
            height: 41, // stride 2 over narrow rows (in place): bands 8 + 8 + 5
            width: 60,
            ..depthwise(16, 20, 3, 2, 1, 1)
        },
        Conv2d {
            padding: (0, 0, 1, 1), // TensorFlow's "SAME" (bottom and right only)
            ..depthwise(32, 10, 3, 2, 0, 1)
        },
        Conv2d {
            kernel: (3, 5), // not square
            padding: (1, 2, 1, 2),
            ..depthwise(16, 9, 3, 1, 1, 1)
        },
    ];
    for case in &cases {
        let weights = case.channels * case.kernel.0 * case.kernel.1;
        check_blocked_algorithm(
            case,
            true,
            0.0,
            |w| w[..weights].to_vec(),
            Algorithm::BlockedDepthwise,
            &[
                (false, false, Epilogue::None),
                (true, true, Epilogue::Relu),
                (false, true, Epilogue::Relu6),
                (true, false, Epilogue::Silu),
                (true, true, Epilogue::HardSwish),
                (true, false, Epilogue::HardSigmoidSixth),
            ],
        );
    }
}

#[test]
fn blocked_winograd_convolutions_match_naive_loops() {
    let cases = [
        shape(16, 12, 16, 3, 1, 1, 1, 1), // same padding, one block (13 columns: odd)
        shape(32, 7, 80, 3, 1, 1, 1, 1),  // a panel and a partial one (80), 7x8 output
        shape(48, 9, 32, 3, 1, 0, 1, 1),  // no padding: 7x8 output
        shape(16, 6, 144, 3, 1, 2, 1, 1), // padding 2 (a patch wholly outside)
        shape(64, 30, 64, 3, 1, 1, 1, 1), // 15x16 tiles: more than one segment of them
        Conv2d {
            padding: (0, 0, 1, 1), // TensorFlow's "SAME" (bottom and right only)
            ..shape(16, 10, 32, 3, 1, 0, 1, 1)
        },
    ];
    for (case, tile) in cases
        .iter()
        .flat_map(|case| [(case, Tile::Two), (case, Tile::Four)])
    {
        assert!(crate::blocked_winograd::computes(case));
        // F(4x4, 3x3)'s transforms round more: as winograd's tests allow, growing with
        // the square root of the terms summed.
        let rounding = match tile {
            Tile::Two => 0.0,
            Tile::Four => 4e-5 * (1.0 + (case.channels * 9) as f32).sqrt(),
        };
        check_blocked_algorithm(
            case,
            true,
            rounding,
            |w| crate::blocked_winograd::transform_weights(w, case.filters, case.channels, tile),
            |isa| Algorithm::BlockedWinograd { tile, isa },
            &[
                (false, false, Epilogue::None),
                (true, true, Epilogue::Relu),
                (true, false, Epilogue::Silu),
                (true, true, Epilogue::HardSwish),
                (true, false, Epilogue::HardSigmoidSixth),
            ],
        );
    }
}

#[test]
fn copied_rows_match_a_per_pixel_copy() {
    // Rows of 7 (runs shorter than a chunk) and of 40 (runs of up to 19: chunks of 8,
    // then what is left, also where the row ends before a whole chunk of 16 at stride 2).
    for width in [7, 40] {
        copied_rows_match_per_pixel_copies_of_width(width);
    }
}

fn copied_rows_match_per_pixel_copies_of_width(width: usize) {
    let source: Vec<f32> = (1..=width).map(|value| value as f32).collect();
    for x0 in -9..10isize {
        for stride in 1..4 {
            for first in 0..4 {
                for length in 0..20 {
                    let mut run = vec![f32::NAN; length];
                    let inside = inside_columns(x0, stride, width, first + length);
                    copy_row(&source, x0, stride, inside, first, &mut run);
                    let expected: Vec<f32> = (first..first + length)
                        .map(|ox| {
                            let x = x0 + (ox * stride) as isize;
                            if (0..width as isize).contains(&x) {
                                source[x as usize]
                            } else {
                                0.0
                            }
                        })
                        .collect();
                    assert_eq!(
                        run, expected,
                        "width {width} x0 {x0} stride {stride} first {first}"
                    );
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

/// `relax_runtime.conv2d` of a 1x2x6x6 input with 3 filters, stride `stride`, padding
/// 1 and the kernel `w` of shape `w_shape`.
fn call_conv2d(w: &mut [f32], w_shape: &mut [i64], stride: i64) -> Result<Vec<f32>, String> {
    let x = values(72, 1);
    let size = (6 + 2 - 3) / stride + 1;
    let mut out = vec![f32::NAN; 3 * (size * size) as usize];
    let (x_shape, out_shape) = ([1i64, 2, 6, 6], [1i64, 3, size, size]);
    let mut args = vec![Argument::input(&x, &x_shape)?, Argument::input(w, w_shape)?];
    // strides, padding (top, left, bottom, right), dilation, groups, epilogue.
    args.extend([stride, stride, 1, 1, 1, 1, 1, 1, 1, 0].map(Argument::int));
    args.push(Argument::output(&mut out, &out_shape)?);
    conv2d(&Arguments::new(
        "relax_runtime.conv2d",
        &args,
        three_threads,
    ))?;
    Ok(out)
}

/// `relax_runtime.conv2d` (padding 1, stride 1, `groups`) of `x` into a tensor of
/// `out_shape`, the shapes as given.
fn call_conv2d_shaped(
    (x, x_shape): (&mut [f32], &mut [i64]),
    (w, w_shape): (&mut [f32], &mut [i64]),
    out_shape: &mut [i64],
    groups: i64,
) -> Result<Vec<f32>, String> {
    let mut out = vec![f32::NAN; out_shape.iter().product::<i64>() as usize];
    let mut args = vec![Argument::input(x, x_shape)?, Argument::input(w, w_shape)?];
    args.extend([1, 1, 1, 1, 1, 1, 1, 1, groups, 0].map(Argument::int));
    args.push(Argument::output(&mut out, out_shape)?);
    conv2d(&Arguments::new(
        "relax_runtime.conv2d",
        &args,
        three_threads,
    ))?;
    Ok(out)
}

#[test]
fn the_kernel_takes_blocked_tensors_and_refuses_what_does_not_fit() {
    // 16 filters over a 2-channel 6x6 input: NCHW in, blocked out (a network's first
    // convolution), against the NCHW kernel; then the blocked input of 16 channels.
    let w = values(16 * 2 * 9, 2);
    let mut x = values(72, 1);
    let direct = call_conv2d_shaped(
        (&mut x.clone(), &mut [1, 2, 6, 6]),
        (&mut w.clone(), &mut [16, 2, 3, 3]),
        &mut [1, 16, 6, 6],
        1,
    )
    .unwrap();
    let mut panels = crate::weights::pack_panels(18, 16, |k, f| w[f * 18 + k]);
    let out = call_conv2d_shaped(
        (&mut x, &mut [1, 2, 6, 6]),
        (&mut panels, &mut [1, 2, 3, 3, 64]),
        &mut [1, 1, 6, 6, 16],
        1,
    )
    .unwrap();
    assert_close(&out, &to_blocked(&direct, 1, 16, 36), "NCHW to blocked");
    // The same with the kernel OIHW: rows too narrow for the direct sums, so packed in
    // filter panels on the call.
    let out = call_conv2d_shaped(
        (&mut x, &mut [1, 2, 6, 6]),
        (&mut w.clone(), &mut [16, 2, 3, 3]),
        &mut [1, 1, 6, 6, 16],
        1,
    )
    .unwrap();
    assert_close(
        &out,
        &to_blocked(&direct, 1, 16, 36),
        "NCHW to blocked, OIHW",
    );
    // A stem wide enough for the direct sums (where the CPU has AVX2): 3 channels onto
    // 32 filters over 20x40.
    let stem_w = values(32 * 3 * 9, 6);
    let mut stem_x = values(3 * 20 * 40, 7);
    let nchw = call_conv2d_shaped(
        (&mut stem_x.clone(), &mut [1, 3, 20, 40]),
        (&mut stem_w.clone(), &mut [32, 3, 3, 3]),
        &mut [1, 32, 20, 40],
        1,
    )
    .unwrap();
    let out = call_conv2d_shaped(
        (&mut stem_x, &mut [1, 3, 20, 40]),
        (&mut stem_w.clone(), &mut [32, 3, 3, 3]),
        &mut [1, 2, 20, 40, 16],
        1,
    )
    .unwrap();
    assert_close(&out, &to_blocked(&nchw, 1, 32, 800), "a stem onto blocks");
    let mut blocked_x = to_blocked(&values(16 * 36, 3), 1, 16, 36);
    let mut panels16 = vec![0.5; 16 * 9 * 64];
    call_conv2d_shaped(
        (&mut blocked_x, &mut [1, 1, 6, 6, 16]),
        (&mut panels16, &mut [1, 16, 3, 3, 64]),
        &mut [1, 1, 6, 6, 16],
        1,
    )
    .unwrap();
    // The same through the blocked Winograd form, against the filter panels.
    let w16 = values(16 * 16 * 9, 4);
    let direct = call_conv2d_shaped(
        (&mut blocked_x.clone(), &mut [1, 1, 6, 6, 16]),
        (
            &mut crate::weights::pack_panels(144, 16, |k, f| w16[f * 144 + k]),
            &mut [1, 16, 3, 3, 64],
        ),
        &mut [1, 1, 6, 6, 16],
        1,
    )
    .unwrap();
    let out = call_conv2d_shaped(
        (&mut blocked_x.clone(), &mut [1, 1, 6, 6, 16]),
        (
            &mut crate::weights::blocked_winograd(&w16, 16, 16, Tile::Two),
            &mut [16, 1, 16, 64],
        ),
        &mut [1, 1, 6, 6, 16],
        1,
    )
    .unwrap();
    assert_close(
        &out,
        &direct,
        "blocked Winograd through the kernel's arguments",
    );
    // A depthwise kernel on the blocked input, against the NCHW depthwise convolution.
    let depthwise_w = values(16 * 9, 5);
    let nchw_x = values(16 * 36, 3);
    let direct = call_conv2d_shaped(
        (&mut nchw_x.clone(), &mut [1, 16, 6, 6]),
        (&mut depthwise_w.clone(), &mut [16, 1, 3, 3]),
        &mut [1, 16, 6, 6],
        16,
    )
    .unwrap();
    let out = call_conv2d_shaped(
        (&mut blocked_x.clone(), &mut [1, 1, 6, 6, 16]),
        (&mut depthwise_w.clone(), &mut [16, 1, 3, 3]),
        &mut [1, 1, 6, 6, 16],
        16,
    )
    .unwrap();
    assert_close(
        &out,
        &to_blocked(&direct, 1, 16, 36),
        "blocked depthwise through the kernel's arguments",
    );
    let refused = |x_shape: &mut [i64], w_shape: &mut [i64], out_shape: &mut [i64], groups| {
        let mut x = vec![0.0; x_shape.iter().product::<i64>() as usize];
        let mut w = vec![0.0; w_shape.iter().product::<i64>() as usize];
        call_conv2d_shaped((&mut x, x_shape), (&mut w, w_shape), out_shape, groups).unwrap_err()
    };
    for (error, expected) in [
        // A blocked input into an NCHW output.
        (
            refused(
                &mut [1, 1, 6, 6, 16],
                &mut [1, 16, 3, 3, 64],
                &mut [1, 16, 6, 6],
                1,
            ),
            "expected 4 and 4",
        ),
        // Blocks of 8 channels; an OIHW kernel for a blocked output from a blocked input;
        // an OIHW kernel of 24 filters (not whole blocks) from an NCHW input.
        (
            refused(
                &mut [1, 2, 6, 6, 8],
                &mut [1, 16, 3, 3, 64],
                &mut [1, 1, 6, 6, 16],
                1,
            ),
            "blocks of 16 channels",
        ),
        (
            refused(
                &mut [1, 1, 6, 6, 16],
                &mut [16, 16, 3, 3],
                &mut [1, 1, 6, 6, 16],
                1,
            ),
            "kernel in filter panels",
        ),
        (
            refused(
                &mut [1, 2, 6, 6],
                &mut [24, 2, 3, 3],
                &mut [1, 1, 6, 6, 16],
                1,
            ),
            "shapes do not fit",
        ),
        // The blocked Winograd form from an NCHW input, or for 32 channels of 16.
        (
            refused(
                &mut [1, 16, 6, 6],
                &mut [16, 1, 16, 64],
                &mut [1, 1, 6, 6, 16],
                1,
            ),
            "takes a blocked input",
        ),
        (
            refused(
                &mut [1, 1, 6, 6, 16],
                &mut [16, 1, 32, 64],
                &mut [1, 1, 6, 6, 16],
                1,
            ),
            "shapes do not fit",
        ),
        // Two groups; panels for 2 channels of a 16-channel input; 2 panels for 16 filters.
        (
            refused(
                &mut [1, 1, 6, 6, 16],
                &mut [1, 8, 3, 3, 64],
                &mut [1, 1, 6, 6, 16],
                2,
            ),
            "shapes do not fit",
        ),
        (
            refused(
                &mut [1, 1, 6, 6, 16],
                &mut [1, 2, 3, 3, 64],
                &mut [1, 1, 6, 6, 16],
                1,
            ),
            "shapes do not fit",
        ),
        (
            refused(
                &mut [1, 1, 6, 6, 16],
                &mut [2, 16, 3, 3, 64],
                &mut [1, 1, 6, 6, 16],
                1,
            ),
            "shapes do not fit",
        ),
        // Blocked depthwise: from an NCHW input; 16 groups of 2 channels of 32 (not
        // depthwise); 8 groups of 16 channels; 32 filters from 16 channels.
        (
            refused(
                &mut [1, 16, 6, 6],
                &mut [16, 1, 3, 3],
                &mut [1, 1, 6, 6, 16],
                16,
            ),
            "blocked depthwise convolution takes a blocked input",
        ),
        (
            refused(
                &mut [1, 2, 6, 6, 16],
                &mut [32, 2, 3, 3],
                &mut [1, 2, 6, 6, 16],
                16,
            ),
            "shapes do not fit",
        ),
        (
            refused(
                &mut [1, 1, 6, 6, 16],
                &mut [16, 2, 3, 3],
                &mut [1, 1, 6, 6, 16],
                8,
            ),
            "shapes do not fit",
        ),
        (
            refused(
                &mut [1, 1, 6, 6, 16],
                &mut [32, 1, 3, 3],
                &mut [1, 2, 6, 6, 16],
                16,
            ),
            "shapes do not fit",
        ),
    ] {
        assert!(error.contains(expected), "{error}");
    }
}

#[test]
fn the_kernel_takes_winograd_and_filter_panel_forms_and_refuses_other_ones() {
    let w = values(3 * 2 * 9, 2);
    let direct = call_conv2d(&mut w.clone(), &mut [3, 2, 3, 3], 1).unwrap();
    for tile in [Tile::Two, Tile::Four] {
        let mut u = crate::weights::winograd(&w, 3, 2, tile);
        let out = call_conv2d(&mut u, &mut [tile.values() as i64, 2, 3], 1).unwrap();
        assert_close(
            &out,
            &direct,
            &format!("{tile:?} through the kernel's arguments"),
        );
    }
    let error = call_conv2d(&mut vec![0.0; 25 * 6], &mut [25, 2, 3], 1).unwrap_err();
    assert!(
        error.contains("16 or 36 values per kernel, not 25"),
        "{error}"
    );
    let mut panels = crate::weights::pack_panels(18, 3, |k, f| w[f * 18 + k]);
    let out = call_conv2d(&mut panels, &mut [1, 2, 3, 3, 64], 1).unwrap();
    assert_close(
        &out,
        &direct,
        "filter panels through the kernel's arguments",
    );
    // Two panels, or panels of 32, for the output's 3 filters.
    for shape in [[2, 2, 3, 3, 64], [1, 2, 3, 3, 32]] {
        let mut panels = vec![0.0; shape.iter().product::<i64>() as usize];
        let error = call_conv2d(&mut panels, &mut shape.clone(), 1).unwrap_err();
        assert!(error.contains("shapes do not fit"), "{shape:?}: {error}");
    }
    // Winograd forms are for stride 1 only (the output's shape fits stride 2).
    call_conv2d(&mut w.clone(), &mut [3, 2, 3, 3], 2).unwrap();
    let error = call_conv2d(&mut vec![0.0; 36 * 6], &mut [36, 2, 3], 2).unwrap_err();
    assert!(error.contains("shapes do not fit"), "{error}");
}

/// Through the kernel's arguments, the layers whose algorithm the kernel picks itself
/// from the shapes, against naive loops: a 3x3 layer over a 64x66 plane (Winograd with
/// the kernel transformed on this call, on CPUs without AVX-512; im2col otherwise), the
/// same on blocked tensors with the kernel in filter panels (blocked Winograd, or direct
/// sums) and an image's 3 channels onto 8 filters (direct sums where the CPU has AVX2
/// or AVX-512).
#[test]
fn the_kernel_picks_winograd_or_direct_sums_from_the_shapes() {
    for (case, rounding) in [
        (
            Conv2d {
                batch: 1,
                ..shape(16, 64, 20, 3, 1, 1, 1, 1)
            },
            4e-5 * (1.0 + (16.0f32 * 9.0).sqrt()),
        ),
        (
            Conv2d {
                batch: 1,
                ..shape(3, 40, 8, 3, 2, 1, 1, 1)
            },
            0.0,
        ),
    ] {
        let (oh, ow) = case.output().unwrap();
        let x = values(case.channels * case.height * case.width, 1);
        let w = values(case.filters * case.channels * 9, 2);
        let expected = naive(&case, &x, &w, None);
        let mut out = vec![f32::NAN; case.filters * oh * ow];
        let (c, f, h, wd) = (
            case.channels as i64,
            case.filters as i64,
            case.height as i64,
            case.width as i64,
        );
        let (x_shape, w_shape, out_shape) =
            ([1, c, h, wd], [f, c, 3, 3], [1, f, oh as i64, ow as i64]);
        let stride = case.stride.0 as i64;
        let mut args = vec![
            Argument::input(&x, &x_shape).unwrap(),
            Argument::input(&w, &w_shape).unwrap(),
        ];
        args.extend([stride, stride, 1, 1, 1, 1, 1, 1, 1, 0].map(Argument::int));
        args.push(Argument::output(&mut out, &out_shape).unwrap());
        conv2d(&Arguments::new(
            "relax_runtime.conv2d",
            &args,
            three_threads,
        ))
        .unwrap();
        assert_close_within(&out, &expected, rounding, &format!("{case:?}"));
    }
    // Blocked, the kernel in filter panels (as relax-runtime packs it at load): Winograd
    // with the panels transformed on this call, on CPUs without AVX-512; direct sums
    // otherwise.
    let case = Conv2d {
        batch: 1,
        ..shape(16, 64, 32, 3, 1, 1, 1, 1)
    };
    let (oh, ow) = case.output().unwrap();
    let (plane, pixels) = (case.height * case.width, oh * ow);
    let x = values(case.channels * plane, 3);
    let w = values(case.filters * case.channels * 9, 4);
    let expected = to_blocked(&naive(&case, &x, &w, None), 1, case.filters, pixels);
    let depth = case.channels * 9;
    let mut panels = crate::weights::pack_panels(depth, case.filters, |k, f| w[f * depth + k]);
    let mut blocked_x = to_blocked(&x, 1, case.channels, plane);
    let blocks = |channels: usize| (channels / BLOCK) as i64;
    let (mut x_shape, mut w_shape, mut out_shape) = (
        [
            1,
            blocks(case.channels),
            case.height as i64,
            case.width as i64,
            16,
        ],
        [1, case.channels as i64, 3, 3, 64],
        [1, blocks(case.filters), oh as i64, ow as i64, 16],
    );
    let out = call_conv2d_shaped(
        (&mut blocked_x, &mut x_shape),
        (&mut panels, &mut w_shape),
        &mut out_shape,
        1,
    )
    .unwrap();
    let rounding = 4e-5 * (1.0 + (16.0f32 * 9.0).sqrt());
    assert_close_within(&out, &expected, rounding, &format!("blocked {case:?}"));
}

/// The direct sums refuse a convolution of no input channels (`direct::computes` never
/// picks one; asked for it, they say why instead of summing nothing).
#[test]
fn direct_sums_refuse_a_convolution_of_no_channels() {
    let case = Conv2d {
        batch: 1,
        ..shape(0, 20, 8, 3, 1, 1, 1, 1)
    };
    let (oh, ow) = case.output().unwrap();
    let mut out = vec![f32::NAN; case.filters * oh * ow];
    // SAFETY: no input or weight value is read; `out` has the output's size.
    let result = unsafe {
        Algorithm::Direct {
            blocked: false,
            isa: Isa::Portable,
        }
        .convolve(
            &case,
            Operands {
                x: [].as_ptr(),
                w: [].as_ptr(),
                per_filter: None,
                residual: None,
                epilogue: Epilogue::None,
                out: Shared(out.as_mut_ptr()),
            },
            three_threads,
        )
    };
    assert_eq!(
        result,
        Err("a direct convolution needs input channels and kernel taps".to_string())
    );
}
