//! Layout transforms against the index maps, and refused shapes.

use super::*;
use crate::parallel::three_threads;
use crate::tensor::Argument;

fn transform(x: &[f32], x_shape: &[i64], out_shape: &[i64]) -> Result<Vec<f32>, String> {
    let portable = transform_with(x, x_shape, out_shape, Isa::Portable)?;
    for isa in Isa::available() {
        let transformed = transform_with(x, x_shape, out_shape, isa)?;
        assert_eq!(
            portable.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            transformed.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "the portable and {isa:?} transforms differ"
        );
    }
    Ok(portable)
}

fn transform_with(
    x: &[f32],
    x_shape: &[i64],
    out_shape: &[i64],
    isa: Isa,
) -> Result<Vec<f32>, String> {
    let mut out = vec![f32::NAN; out_shape.iter().product::<i64>().max(0) as usize];
    let args = [
        Argument::input(x, x_shape)?,
        Argument::output(&mut out, out_shape)?,
    ];
    layout_blocked_with(
        &Arguments::new("relax_runtime.layout_blocked", &args, three_threads),
        isa,
    )?;
    Ok(out)
}

#[test]
fn blocks_and_back_match_the_index_maps() {
    // Two images of 32 channels over 5x7 (odd sizes), one of 16 over 1x1, rows of whole
    // and partial 16-pixel transposes (16, 37 = 2 x 16 + 5).
    for (batch, channels, height, width) in [
        (2usize, 32usize, 5usize, 7usize),
        (1, 16, 1, 1),
        (1, 16, 2, 16),
        (2, 48, 3, 37),
    ] {
        let count = batch * channels * height * width;
        let x: Vec<f32> = (0..count).map(|value| value as f32).collect();
        let nchw = [batch, channels, height, width].map(|dim| dim as i64);
        let blocked = [
            batch as i64,
            (channels / BLOCK) as i64,
            height as i64,
            width as i64,
            BLOCK as i64,
        ];
        let out = transform(&x, &nchw, &blocked).unwrap();
        for (index, value) in x.iter().enumerate() {
            let (n, c, y, w) = (
                index / (channels * height * width),
                index / (height * width) % channels,
                index / width % height,
                index % width,
            );
            let at =
                (((n * channels / BLOCK + c / BLOCK) * height + y) * width + w) * BLOCK + c % BLOCK;
            assert_eq!(out[at], *value, "n {n} c {c} y {y} x {w}");
        }
        assert_eq!(transform(&out, &blocked, &nchw).unwrap(), x);
    }
}

#[test]
fn shapes_that_do_not_fit_are_refused() {
    let x = vec![0.0; 2 * 16 * 9];
    for (x_shape, out_shape, expected) in [
        (vec![2, 16, 3, 3], vec![2, 16, 3, 3], "expected 4 and 5"),
        (vec![1, 32, 3, 3], vec![1, 1, 3, 3, 32], "shapes do not fit"),
        (vec![2, 16, 3, 3], vec![1, 2, 3, 3, 16], "shapes do not fit"),
        (vec![2, 16, 3, 3], vec![2, 1, 9, 1, 16], "shapes do not fit"),
        (vec![2, 1, 3, 3, 16], vec![2, 16, 1, 9], "shapes do not fit"),
    ] {
        let error = transform(&x, &x_shape, &out_shape).unwrap_err();
        assert!(error.contains(expected), "{error}");
    }
    // 24 channels are not whole blocks.
    let x = vec![0.0; 24 * 4];
    let error = transform(&x, &[1, 24, 2, 2], &[1, 2, 2, 2, 16]).unwrap_err();
    assert!(error.contains("shapes do not fit"), "{error}");
}
