use super::*;
use crate::parallel::{test_values, three_threads};
use crate::tensor::Argument;

/// ONNX's ConvTranspose by its definition: every input pixel times every tap, added
/// where the tap lands; in double precision.
fn naive(shape: &ConvTranspose, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<f64> {
    let (oh, ow) = shape.output;
    let (channels, filters) = (shape.channels / shape.groups, shape.filters / shape.groups);
    let (kh, kw) = shape.kernel;
    let (top, left, _, _) = shape.padding;
    let mut out = vec![0f64; shape.batch * shape.filters * oh * ow];
    for n in 0..shape.batch {
        for f in 0..shape.filters {
            let plane = &mut out[(n * shape.filters + f) * oh * ow..][..oh * ow];
            plane.fill(bias.map_or(0.0, |bias| bias[f] as f64));
            let (group, local) = (f / filters, f % filters);
            for c in group * channels..(group + 1) * channels {
                for iy in 0..shape.height {
                    for ix in 0..shape.width {
                        let value = x
                            [((n * shape.channels + c) * shape.height + iy) * shape.width + ix]
                            as f64;
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let oy = (iy * shape.stride.0 + ky * shape.dilation.0) as isize
                                    - top as isize;
                                let ox = (ix * shape.stride.1 + kx * shape.dilation.1) as isize
                                    - left as isize;
                                if oy < 0 || ox < 0 || oy >= oh as isize || ox >= ow as isize {
                                    continue;
                                }
                                let weight = w[((c * filters + local) * kh + ky) * kw + kx] as f64;
                                plane[oy as usize * ow + ox as usize] += value * weight;
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// Calls the kernel through its arguments, as TVM would.
fn call(
    shape: &ConvTranspose,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    epilogue: i64,
) -> Result<Vec<f32>, String> {
    let (oh, ow) = shape.output;
    let x_shape = [shape.batch, shape.channels, shape.height, shape.width].map(|d| d as i64);
    let w_shape = [
        shape.channels,
        shape.filters / shape.groups.max(1),
        shape.kernel.0,
        shape.kernel.1,
    ]
    .map(|d| d as i64);
    let out_shape = [shape.batch, shape.filters, oh, ow].map(|d| d as i64);
    let bias_shape = [shape.filters as i64];
    let mut out = vec![f32::NAN; out_shape.iter().product::<i64>() as usize];
    let mut args = vec![Argument::input(x, &x_shape)?, Argument::input(w, &w_shape)?];
    if let Some(bias) = bias {
        args.push(Argument::input(bias, &bias_shape)?);
    }
    let (top, left, bottom, right) = shape.padding;
    let settings = [
        shape.stride.0,
        shape.stride.1,
        top,
        left,
        bottom,
        right,
        shape.dilation.0,
        shape.dilation.1,
        shape.groups,
    ];
    args.extend(settings.map(|value| Argument::int(value as i64)));
    args.push(Argument::int(epilogue));
    args.push(Argument::output(&mut out, &out_shape)?);
    let name = if bias.is_some() {
        "relax_runtime.conv2d_transpose_bias"
    } else {
        "relax_runtime.conv2d_transpose"
    };
    let arguments = Arguments::new(name, &args, three_threads);
    if bias.is_some() {
        conv2d_transpose_bias(&arguments)?;
    } else {
        conv2d_transpose(&arguments)?;
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn shape(
    batch: usize,
    channels: usize,
    size: (usize, usize),
    filters: usize,
    kernel: (usize, usize),
    stride: (usize, usize),
    padding: (usize, usize, usize, usize),
    dilation: (usize, usize),
    groups: usize,
    output_padding: (usize, usize),
) -> ConvTranspose {
    let mut shape = ConvTranspose {
        batch,
        channels,
        height: size.0,
        width: size.1,
        filters,
        kernel,
        stride,
        padding,
        dilation,
        groups,
        output: (0, 0),
    };
    let (height, width) = shape.base_output().expect("a positive output");
    shape.output = (height + output_padding.0, width + output_padding.1);
    shape
}

#[test]
fn transposed_convolutions_match_the_definition() {
    let cases = [
        // a detector head's 2x upsampling: 4x4 kernel, stride 2, padding 1
        shape(
            1,
            16,
            (9, 7),
            8,
            (4, 4),
            (2, 2),
            (1, 1, 1, 1),
            (1, 1),
            1,
            (0, 0),
        ),
        // 2x2 stride 2 (U-Net), two images, odd channels
        shape(
            2,
            5,
            (6, 5),
            3,
            (2, 2),
            (2, 2),
            (0, 0, 0, 0),
            (1, 1),
            1,
            (0, 0),
        ),
        // stride 3 with output padding, asymmetric padding, 3x1 kernel
        shape(
            1,
            4,
            (5, 6),
            6,
            (3, 1),
            (3, 2),
            (2, 0, 1, 0),
            (1, 1),
            1,
            (2, 1),
        ),
        // dilation 2, stride 1, groups 2
        shape(
            1,
            6,
            (7, 8),
            4,
            (3, 3),
            (1, 1),
            (1, 1, 1, 1),
            (2, 2),
            2,
            (0, 0),
        ),
        // depthwise-style (groups = channels), stride 2, output padding 1
        shape(
            1,
            8,
            (5, 5),
            8,
            (3, 3),
            (2, 2),
            (1, 1, 1, 1),
            (1, 1),
            8,
            (1, 1),
        ),
        // a detector head's last layer: one filter, split by chunks of input rows
        shape(
            1,
            24,
            (13, 9),
            1,
            (2, 2),
            (2, 2),
            (0, 0, 0, 0),
            (1, 1),
            1,
            (0, 0),
        ),
        // rows apart with gaps between them (stride 3, kernel 2), padding and output
        // padding: the rows no tap reaches hold the bias
        shape(
            1,
            3,
            (10, 4),
            2,
            (2, 2),
            (3, 3),
            (1, 1, 0, 0),
            (1, 1),
            1,
            (2, 1),
        ),
        // a 1x1 input, many filters (more than one block of columns)
        shape(
            1,
            3,
            (1, 1),
            70,
            (5, 5),
            (1, 1),
            (0, 0, 0, 0),
            (1, 1),
            1,
            (0, 0),
        ),
    ];
    for (index, shape) in cases.iter().enumerate() {
        let x = test_values(
            shape.batch * shape.channels * shape.height * shape.width,
            1 + index as u64,
            1.0,
        );
        let w = test_values(
            shape.channels * shape.filters / shape.groups * shape.kernel.0 * shape.kernel.1,
            20 + index as u64,
            1.0,
        );
        let bias = test_values(shape.filters, 40 + index as u64, 1.0);
        for with_bias in [false, true] {
            let bias = with_bias.then_some(bias.as_slice());
            let expected = naive(shape, &x, &w, bias);
            for (epilogue, activation) in [(0, Epilogue::None), (1, Epilogue::Relu)] {
                let out = call(shape, &x, &w, bias, epilogue).unwrap();
                assert_eq!(out.len(), expected.len());
                for (position, (actual, expected)) in out.iter().zip(&expected).enumerate() {
                    let mut expected = [*expected as f32];
                    activation.apply(&mut expected);
                    let tolerance = 1e-5 * (1.0 + expected[0].abs());
                    assert!(
                        (actual - expected[0]).abs() <= tolerance,
                        "case {index} {shape:?}, bias {with_bias}, epilogue {epilogue}, [{position}]: {actual} vs {}",
                        expected[0]
                    );
                }
            }
        }
    }
}

#[test]
fn shapes_that_do_not_fit_are_refused() {
    let good = shape(
        1,
        4,
        (5, 5),
        6,
        (3, 3),
        (2, 2),
        (1, 1, 1, 1),
        (1, 1),
        1,
        (0, 0),
    );
    let x = vec![0.5; 100];
    let w = vec![0.5; 4 * 6 * 9];
    assert!(call(&good, &x, &w, None, 0).is_ok());
    // Output padding as large as the stride.
    let mut too_padded = good;
    too_padded.output.0 += 2;
    let error = call(&too_padded, &x, &w, None, 0).unwrap_err();
    assert!(error.contains("shapes do not fit"), "{error}");
    // An output smaller than the convolution gives.
    let mut too_small = good;
    too_small.output.1 -= 1;
    assert!(call(&too_small, &x, &w, None, 0)
        .unwrap_err()
        .contains("shapes do not fit"));
    // Groups that do not divide the channels.
    let mut groups = good;
    groups.groups = 3;
    groups.filters = 6;
    assert!(call(&groups, &x, &w[..4 * 2 * 9], None, 0).is_err());
    // An unknown epilogue, and a stride of 0.
    assert!(call(&good, &x, &w, None, 99)
        .unwrap_err()
        .contains("epilogue"));
    let mut zero_stride = good;
    zero_stride.stride = (0, 2);
    assert!(call(&zero_stride, &x, &w, None, 0).is_err());
}
