//! bf16 blocked convolutions against naive loops over the bf16-rounded operands, and the
//! AVX512-BF16 tile against the portable one, bit for bit.

use super::super::{blocked_conv, Arithmetic};
use super::*;
use crate::bf16_panels::widen;
use crate::conv_operands::{Operands, PerFilter};
use crate::epilogue::Epilogue;
use crate::parallel::{test_values, three_threads};

/// `[N, C, H, W]` as `[N, C / 16, H, W, 16]`.
fn to_blocked(values: &[f32], channels: usize, plane: usize) -> Vec<f32> {
    let mut out = vec![0f32; values.len()];
    for (index, value) in values.iter().enumerate() {
        let (n, c, p) = (
            index / (channels * plane),
            index / plane % channels,
            index % plane,
        );
        out[((n * channels.div_ceil(BLOCK) + c / BLOCK) * plane + p) * BLOCK + c % BLOCK] = *value;
    }
    out
}

/// The convolution of the bf16-rounded operands in f64, NCHW, then `* scale + shift +
/// residual`; with each output's sum of |products| (what float32 sums may lose).
fn reference(
    shape: &Conv2d,
    x: &[f32],
    w: &[f32],
    (scale, shift, residual): (&[f32], &[f32], Option<&[f32]>),
) -> (Vec<f32>, Vec<f64>) {
    let bf = |value: f32| f64::from(widen(round(value)));
    let (oh, ow) = shape.output().unwrap();
    let (mut out, mut magnitude) = (Vec::new(), Vec::new());
    for n in 0..shape.batch {
        for o in 0..shape.filters {
            for oy in 0..oh {
                for ox in 0..ow {
                    let (mut sum, mut size) = (0f64, 0f64);
                    for c in 0..shape.channels {
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
                                let input = x[((n * shape.channels + c) * shape.height
                                    + y as usize)
                                    * shape.width
                                    + xx as usize];
                                let weight = w[((o * shape.channels + c) * shape.kernel.0 + ky)
                                    * shape.kernel.1
                                    + kx];
                                let product = bf(input) * bf(weight);
                                sum += product;
                                size += product.abs();
                            }
                        }
                    }
                    let index = out.len();
                    let extra = residual.map_or(0.0, |residual| f64::from(residual[index]));
                    out.push((sum * f64::from(scale[o]) + f64::from(shift[o]) + extra) as f32);
                    magnitude.push(size * f64::from(scale[o].abs()) + 1.0);
                }
            }
        }
    }
    (out, magnitude)
}

fn shape(
    channels: usize,
    size: usize,
    filters: usize,
    kernel: usize,
    stride: usize,
    pad: usize,
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
        dilation: (1, 1),
        groups: 1,
    }
}

/// The bf16 tiles this CPU runs, the portable one first.
fn isas_here() -> Vec<Bf16Isa> {
    [Bf16Isa::Portable, Bf16Isa::Avx512Bf16, Bf16Isa::Amx]
        .into_iter()
        .filter(|isa| isa.runs_here())
        .collect()
}

/// The blocked bf16 convolution of `case` on `isa`: `input` blocked (whole blocks),
/// `panels` the kernel's bf16 filter panels, `* scale + shift + residual` (blocked) and
/// `epilogue` after.
fn convolved(
    case: &Conv2d,
    isa: Bf16Isa,
    (input, panels): (&[f32], &[f32]),
    (scale, shift, residual): (&[f32], &[f32], Option<&[f32]>),
    epilogue: Epilogue,
) -> Vec<f32> {
    let (oh, ow) = case.output().unwrap();
    let blocks = |channels: usize| channels.div_ceil(BLOCK) * BLOCK;
    let outputs = case.batch * blocks(case.filters) * oh * ow;
    let depth = case.channels.div_ceil(2) * 2 * case.kernel.0 * case.kernel.1;
    assert!(isa.runs_here());
    assert_eq!(
        input.len(),
        case.batch * blocks(case.channels) * case.height * case.width
    );
    assert_eq!(
        panels.len(),
        case.filters.div_ceil(PANEL) * PANEL * depth / 2
    );
    assert!(scale.len() >= case.filters && shift.len() >= case.filters);
    assert!(residual.is_none_or(|residual| residual.len() == outputs));
    let mut out = vec![f32::NAN; outputs];
    // SAFETY: the buffers have the sizes `case` describes, checked above (a blocked input
    // of whole blocks, the kernel's bf16 filter panels, blocked output and residual);
    // `isa` runs here.
    unsafe {
        blocked_conv(
            case,
            true,
            Arithmetic::Bf16(isa),
            Operands {
                x: input.as_ptr(),
                w: panels.as_ptr(),
                per_filter: Some(PerFilter {
                    scale: Some(scale),
                    shift,
                }),
                residual: residual.map(<[f32]>::as_ptr),
                epilogue,
                out: Shared(out.as_mut_ptr()),
            },
            three_threads,
        )
        .unwrap()
    };
    out
}

#[test]
fn bf16_blocked_convolutions_match_naive_loops_and_the_tiles_agree_bit_for_bit() {
    // (AMX's tiles sum in another order, and flush subnormals: they are held to the
    // bound alone.)
    let cases = [
        shape(32, 12, 80, 1, 1, 0), // pointwise: a panel and a partial one (16 filters)
        shape(288, 7, 64, 1, 1, 0), // 18 blocks of channels: two passes, a tile resumes
        shape(48, 9, 32, 3, 1, 1),  // 3x3 same padding: a pass a block
        shape(32, 11, 128, 3, 2, 1), // stride 2, two panels
        shape(16, 14, 48, 1, 2, 0), // strided 1x1
        Conv2d {
            dilation: (2, 2), // dilated, padding 2
            ..shape(32, 11, 16, 3, 1, 2)
        },
        Conv2d {
            padding: (0, 0, 1, 1), // TensorFlow's "SAME" (bottom and right only)
            ..shape(16, 10, 32, 3, 2, 0)
        },
    ];
    let isas = isas_here();
    for (number, case) in cases.iter().enumerate() {
        let seed = number as u64 * 10;
        let (oh, ow) = case.output().unwrap();
        let (plane, pixels) = (case.height * case.width, oh * ow);
        let x = test_values(case.batch * case.channels * plane, seed + 1, 1.0);
        let w = test_values(
            case.filters * case.channels * case.kernel.0 * case.kernel.1,
            seed + 2,
            1.0,
        );
        let shift = test_values(case.filters, seed + 3, 1.0);
        let scale = test_values(case.filters, seed + 4, 1.0);
        let residual = test_values(case.batch * case.filters * pixels, seed + 5, 1.0);
        let panels = pack(case.filters, case.channels, case.kernel, &w);
        let input = to_blocked(&x, case.channels, plane);
        let blocked_residual = to_blocked(&residual, case.filters, pixels);
        for (with_residual, epilogue) in [(false, Epilogue::None), (true, Epilogue::Relu)] {
            let (mut expected, magnitude) = reference(
                case,
                &x,
                &w,
                (&scale, &shift, with_residual.then_some(residual.as_slice())),
            );
            epilogue.apply(&mut expected);
            let expected = to_blocked(&expected, case.filters, pixels);
            let magnitude: Vec<f32> = magnitude.iter().map(|value| *value as f32).collect();
            let magnitude = to_blocked(&magnitude, case.filters, pixels);
            let mut first: Option<Vec<f32>> = None;
            for &isa in &isas {
                let residual = with_residual.then_some(blocked_residual.as_slice());
                let out = convolved(
                    case,
                    isa,
                    (&input, &panels),
                    (&scale, &shift, residual),
                    epilogue,
                );
                for (index, ((a, e), size)) in out.iter().zip(&expected).zip(&magnitude).enumerate()
                {
                    assert!(
                        (a - e).abs() <= 1e-6 * size,
                        "{isa:?} {case:?} {epilogue:?} [{index}]: {a} vs {e}"
                    );
                }
                match &first {
                    _ if isa == Bf16Isa::Amx => {}
                    None => first = Some(out),
                    Some(first) => assert!(
                        first
                            .iter()
                            .zip(&out)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{isa:?} differs from the portable tile on {case:?}"
                    ),
                }
            }
        }
    }
}

#[test]
fn a_bf16_convolution_refuses_an_nchw_input() {
    let case = shape(16, 4, 16, 1, 1, 0);
    let (x, panels) = (vec![0f32; 2 * 16 * 20], pack(16, 16, (1, 1), &[0.0; 256]));
    let mut out = vec![0f32; 2 * 16 * 20];
    // SAFETY: sizes as `case` describes; the portable tile runs anywhere.
    let result = unsafe {
        blocked_conv(
            &case,
            false,
            Arithmetic::Bf16(Bf16Isa::Portable),
            Operands {
                x: x.as_ptr(),
                w: panels.as_ptr(),
                per_filter: None,
                residual: None,
                epilogue: Epilogue::None,
                out: Shared(out.as_mut_ptr()),
            },
            three_threads,
        )
    };
    assert!(result.unwrap_err().contains("blocked input"));
}

/// The quantizing epilogue (a QDQ model's layer: integer products of 8-bit values, its
/// scales folded into the kernel's scale and shift) on sums that float32 holds exactly:
/// every tile gives the exact rounding, half to even, and the clamp. The shifts are
/// multiples of 1/128 and the scales powers of two, so many outputs land on a tie.
#[test]
fn a_quantizing_epilogue_rounds_exact_integer_sums_alike_on_every_tile() {
    let (low, high) = (-100, 90);
    let epilogue = Epilogue::Quantize { low, high };
    for (number, case) in [shape(32, 12, 80, 1, 1, 0), shape(64, 9, 32, 3, 1, 1)]
        .iter()
        .enumerate()
    {
        let seed = 100 + number as u64 * 10;
        let (oh, ow) = case.output().unwrap();
        let (plane, pixels) = (case.height * case.width, oh * ow);
        let integers = |count, seed, limit: f32| -> Vec<f32> {
            test_values(count, seed, 1.0)
                .iter()
                .map(|value| (value * limit).round())
                .collect()
        };
        // 8-bit values less a zero point, and int8 weights.
        let x = integers(case.batch * case.channels * plane, seed + 1, 255.0);
        let w = integers(
            case.filters * case.channels * case.kernel.0 * case.kernel.1,
            seed + 2,
            127.0,
        );
        let scale: Vec<f32> = (0..case.filters)
            .map(|filter| 2f32.powi(-8 - (filter % 3) as i32))
            .collect();
        let shift: Vec<f32> = integers(case.filters, seed + 3, 64.0)
            .iter()
            .map(|value| value / 128.0)
            .collect();
        let (mut expected, _) = reference(case, &x, &w, (&scale, &shift, None));
        assert!(
            expected.iter().any(|value| value.fract().abs() == 0.5),
            "some sums are ties"
        );
        epilogue.apply(&mut expected);
        assert!(
            expected.contains(&(low as f32))
                && expected.contains(&(high as f32))
                && expected.iter().any(|value| value.abs() < 10.0),
            "the case reaches both bounds and the values between"
        );
        let expected = to_blocked(&expected, case.filters, pixels);
        let panels = pack(case.filters, case.channels, case.kernel, &w);
        let input = to_blocked(&x, case.channels, plane);
        for isa in isas_here() {
            let out = convolved(
                case,
                isa,
                (&input, &panels),
                (&scale, &shift, None),
                epilogue,
            );
            assert_eq!(out, expected, "{isa:?} {case:?}");
        }
    }
}
