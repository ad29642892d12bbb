//! Dense layers over packed panels against naive loops, on both tile kinds, split over
//! three OS threads.

use super::*;
use crate::parallel::{test_values, three_threads};
use crate::simd::Isa;

#[test]
fn packed_dense_layers_match_naive_loops() {
    // Rows below, at and above a tile; columns inside one panel, exactly one, and a
    // partial last panel; short and long products.
    for (m, k, n) in [
        (1, 5, 3),
        (7, 33, 64),
        (13, 16, 130),
        (16, 40, 200),
        (6, 1, 65),
    ] {
        let x = test_values(m * k, 1, 1.0);
        let w = test_values(k * n, 2, 1.0);
        let bias = test_values(n, 3, 1.0);
        let residual = test_values(m * n, 4, 1.0);
        let panels = pack(k, n, |row, column| w[row * n + column]);
        for (with_bias, with_residual, epilogue) in [
            (false, false, Epilogue::None),
            (true, false, Epilogue::Relu),
            (true, true, Epilogue::Gelu),
            (false, true, Epilogue::None),
            (true, true, Epilogue::Relu6),
            (true, false, Epilogue::Silu),
        ] {
            let mut expected: Vec<f32> = (0..m * n)
                .map(|index| {
                    let (row, column) = (index / n, index % n);
                    let mut sum: f64 = (0..k)
                        .map(|depth| x[row * k + depth] as f64 * w[depth * n + column] as f64)
                        .sum();
                    if with_bias {
                        sum += bias[column] as f64;
                    }
                    if with_residual {
                        sum += residual[index] as f64;
                    }
                    sum as f32
                })
                .collect();
            epilogue.apply(&mut expected);
            let after = After {
                bias: with_bias.then_some(bias.as_slice()),
                residual: with_residual.then_some(residual.as_ptr()),
                epilogue,
            };
            for isa in Isa::available() {
                let mut out = vec![f32::NAN; m * n];
                // SAFETY: the buffers have the sizes given; `isa` is available.
                unsafe {
                    dense_panels_into(
                        m,
                        n,
                        k,
                        x.as_ptr(),
                        panels.as_ptr(),
                        after,
                        Shared(out.as_mut_ptr()),
                        three_threads,
                        isa,
                    )
                }
                .unwrap();
                for (index, (actual, expected)) in out.iter().zip(&expected).enumerate() {
                    assert!(
                        (actual - expected).abs() <= 1e-5 * (1.0 + expected.abs()) * k as f32,
                        "m {m} k {k} n {n} {isa:?} {epilogue:?} [{index}]: {actual} vs {expected}"
                    );
                }
            }
        }
    }
}

#[test]
fn packing_pads_the_last_panel_with_zeros() {
    let packed = pack(2, 3, |row, column| (row * 10 + column) as f32);
    assert_eq!(packed.len(), 2 * PANEL);
    assert_eq!(&packed[..4], [0.0, 1.0, 2.0, 0.0]);
    assert_eq!(&packed[PANEL..PANEL + 4], [10.0, 11.0, 12.0, 0.0]);
    assert!(packed[PANEL + 3..].iter().all(|&value| value == 0.0));
}
