//! bf16 dense layers against naive loops over the bf16-rounded operands, and the
//! AVX512-BF16 tile against the portable one, bit for bit.

use super::*;
use crate::parallel::{test_values, three_threads};
use crate::tensor::Argument;

#[test]
fn rounding_is_to_nearest_with_ties_to_even() {
    // 1 + 2^-8 lies halfway between bf16's 1 and 1 + 2^-7: to the even one, 1.
    assert_eq!(widen(round(1.0 + 1.0 / 256.0)), 1.0);
    // 1 + 3 x 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: to the even one.
    assert_eq!(widen(round(1.0 + 3.0 / 256.0)), 1.0 + 1.0 / 64.0);
    // Just above halfway goes up.
    assert_eq!(
        widen(round(1.0 + 1.0 / 256.0 + 1.0 / 65536.0)),
        1.0 + 1.0 / 128.0
    );
    assert_eq!(widen(round(-2.5)), -2.5);
    assert!(widen(round(f32::NAN)).is_nan());
    assert_eq!(widen(round(f32::INFINITY)), f32::INFINITY);
    // The largest float32 rounds past bf16's largest finite value, to infinity.
    assert_eq!(widen(round(f32::MAX)), f32::INFINITY);
}

/// The product over bf16-rounded operands, in f64.
fn reference(x: &[f32], w: &[f32], (m, k, n): (usize, usize, usize)) -> Vec<f64> {
    let bf = |value: f32| widen(round(value)) as f64;
    (0..m * n)
        .map(|index| {
            let (row, column) = (index / n, index % n);
            (0..k)
                .map(|depth| bf(x[row * k + depth]) * bf(w[depth * n + column]))
                .sum()
        })
        .collect()
}

#[test]
fn bf16_dense_layers_match_naive_loops_and_the_tiles_agree_bit_for_bit() {
    // Rows below, at and above a tile; an odd depth (a half-empty last pair); columns
    // inside one panel, exactly one, and a partial last panel.
    for (m, k, n) in [
        (1, 5, 3),
        (7, 33, 64),
        (13, 16, 130),
        (6, 1, 65),
        (2, 384, 200),
        (37, 100, 70), // AMX: three tiles of rows, 3 steps of 16 pairs and one of 2
    ] {
        let x = test_values(m * k, 1, 1.0);
        let w = test_values(k * n, 2, 1.0);
        let bias = test_values(n, 3, 1.0);
        let residual = test_values(m * n, 4, 1.0);
        let panels = pack(k, n, |row, column| w[row * n + column]);
        assert_eq!(panels.len(), n.div_ceil(PANEL) * k.div_ceil(2) * PANEL);
        let sums = reference(&x, &w, (m, k, n));
        for (with_bias, with_residual, epilogue) in [
            (false, false, Epilogue::None),
            (true, false, Epilogue::Relu),
            (false, true, Epilogue::Gelu),
            (true, true, Epilogue::None),
        ] {
            let mut expected: Vec<f32> = sums
                .iter()
                .enumerate()
                .map(|(index, sum)| {
                    let bias = if with_bias {
                        bias[index % n] as f64
                    } else {
                        0.0
                    };
                    let residual = if with_residual {
                        residual[index] as f64
                    } else {
                        0.0
                    };
                    (sum + bias + residual) as f32
                })
                .collect();
            epilogue.apply(&mut expected);
            let mut outputs = Vec::new();
            // (AMX sums in another order: it is held to the bound alone.)
            for isa in [Bf16Isa::Portable, Bf16Isa::Avx512Bf16, Bf16Isa::Amx] {
                if !isa.runs_here() {
                    continue;
                }
                let mut out = vec![f32::NAN; m * n];
                // SAFETY: `out` holds m x n values, used by nothing else; `isa` runs here.
                unsafe {
                    dense_into(
                        (m, n, k),
                        &x,
                        &panels,
                        After {
                            bias: with_bias.then_some(bias.as_slice()),
                            residual: with_residual.then_some(residual.as_slice()),
                            epilogue,
                        },
                        Shared(out.as_mut_ptr()),
                        three_threads,
                        isa,
                    )
                }
                .unwrap();
                for (index, (actual, expected)) in out.iter().zip(&expected).enumerate() {
                    // Float32 sums of exact products: k roundings of 2^-24 at most.
                    assert!(
                        (actual - expected).abs() <= 1e-6 * (1.0 + expected.abs()) * k as f32,
                        "m {m} k {k} n {n} {isa:?} [{index}]: {actual} vs {expected}"
                    );
                }
                if isa != Bf16Isa::Amx {
                    outputs.push(out);
                }
            }
            if let [portable, avx512] = outputs.as_slice() {
                let same = portable
                    .iter()
                    .zip(avx512)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "m {m} k {k} n {n}: the AVX512-BF16 tile differs");
            }
        }
    }
}

#[test]
fn the_kernel_checks_the_panels_shape() {
    let (m, k, n) = (2, 7, 70);
    let x = test_values(m * k, 1, 1.0);
    let mut out = vec![0f32; m * n];
    let (x_shape, out_shape) = ([m as i64, k as i64], [m as i64, n as i64]);
    // Float32 panels' shape (`k` rows, not `ceil(k / 2)`) is refused, naming the layout.
    let float32_panels = vec![0f32; 2 * k * 64];
    let wrong = [2, k as i64, 64];
    let args = [
        Argument::input(&x, &x_shape).unwrap(),
        Argument::input(&float32_panels, &wrong).unwrap(),
        Argument::int(0),
        Argument::int(0),
        Argument::output(&mut out, &out_shape).unwrap(),
    ];
    let error = dense_bf16(&Arguments::new(
        "relax_runtime.dense_bf16",
        &args,
        three_threads,
    ))
    .unwrap_err();
    assert!(error.contains("bf16 panels of pairs"), "{error}");
    // The right panels, asked to be transposed: refused, saying what to give.
    let panels = pack(k, n, |_, _| 1.0);
    let shape = [2, k.div_ceil(2) as i64, 64];
    let args = [
        Argument::input(&x, &x_shape).unwrap(),
        Argument::input(&panels, &shape).unwrap(),
        Argument::int(1),
        Argument::int(0),
        Argument::output(&mut out, &out_shape).unwrap(),
    ];
    let error = dense_bf16(&Arguments::new(
        "relax_runtime.dense_bf16",
        &args,
        three_threads,
    ))
    .unwrap_err();
    assert!(error.contains("transpose_w is 1"), "{error}");
}
