//! The kernels against naive loops, split over three OS threads (as TVM's pool would).

use super::*;
use crate::parallel::three_threads;

fn values(count: usize, seed: u64) -> Vec<f32> {
    crate::parallel::test_values(count, seed, 1.0)
}

fn assert_close(actual: &[f32], expected: &[f32], what: &str) {
    assert_eq!(actual.len(), expected.len());
    for (index, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (a - e).abs() <= 1e-4 * (1.0 + e.abs()),
            "{what}[{index}]: {a} vs {e}"
        );
    }
}

/// `a[m, k] · b` in f64, `b` read as `[k, n]`, or as `[n, k]` transposed.
fn naive_product(
    a: &[f32],
    b: &[f32],
    (m, n, k): (usize, usize, usize),
    transposed: bool,
) -> Vec<f64> {
    let mut product = vec![0f64; m * n];
    for row in 0..m {
        for column in 0..n {
            for inner in 0..k {
                let value = if transposed {
                    b[column * k + inner]
                } else {
                    b[inner * n + column]
                };
                product[row * n + column] += a[row * k + inner] as f64 * value as f64;
            }
        }
    }
    product
}

#[test]
fn dense_matches_naive_loops_for_every_layout_and_epilogue() {
    for (m, n, k) in [
        (1, 10, 784),
        (16, 384, 384),
        (37, 1536, 384),
        (200, 7, 33),
        (3, 1, 5),
    ] {
        for transposed in [false, true] {
            for (epilogue, has_bias, has_residual) in [
                (Epilogue::None, false, false),
                (Epilogue::Gelu, true, false),
                (Epilogue::Relu, true, true),
                (Epilogue::None, false, true),
                (Epilogue::Relu6, true, false),
                (Epilogue::Silu, true, true),
                (Epilogue::HardSwish, true, false),
                (Epilogue::HardSigmoid, true, true),
            ] {
                let x = values(m * k, 1);
                let w = values(n * k, 2);
                let bias = values(n, 3);
                let residual = values(m * n, 4);
                let product = naive_product(&x, &w, (m, n, k), transposed);
                let mut expected = vec![0f32; m * n];
                for row in 0..m {
                    for column in 0..n {
                        expected[row * n + column] = product[row * n + column] as f32
                            + if has_bias { bias[column] } else { 0.0 }
                            + if has_residual {
                                residual[row * n + column]
                            } else {
                                0.0
                            };
                    }
                }
                epilogue.apply(&mut expected);
                let mut w_copy = w.clone();
                let mut out = vec![f32::NAN; m * n];
                // SAFETY: every buffer has the sizes the kernel is told.
                unsafe {
                    dense_into(
                        m,
                        n,
                        k,
                        x.as_ptr(),
                        Rhs::of(w_copy.as_mut_ptr(), k, n, transposed),
                        has_bias.then_some(bias.as_slice()),
                        has_residual.then_some(residual.as_ptr()),
                        epilogue,
                        Shared(out.as_mut_ptr()),
                        three_threads,
                    )
                    .unwrap();
                }
                assert_close(
                    &out,
                    &expected,
                    &format!("dense {m}x{n}x{k} {transposed} {epilogue:?} {has_residual}"),
                );
            }
        }
    }
}

#[test]
fn batch_matmul_matches_naive_loops_shared_and_transposed() {
    for (batch, m, n, k) in [
        (12, 16, 16, 32),
        (2, 128, 32, 128),
        (1, 70, 9, 13),
        (24, 1, 5, 3),
    ] {
        for (transposed, shared) in [(false, false), (true, false), (false, true)] {
            let a = values(batch * m * k, 4);
            let mut b = values(if shared { k * n } else { batch * k * n }, 5);
            let alpha = 0.25;
            let step = if shared { 0 } else { k * n };
            let expected: Vec<f32> = (0..batch)
                .flat_map(|index| {
                    let a = &a[index * m * k..][..m * k];
                    let b = &b[index * step..][..k * n];
                    naive_product(a, b, (m, n, k), transposed)
                })
                .map(|sum| alpha * sum as f32)
                .collect();
            let mut out = vec![f32::NAN; batch * m * n];
            // SAFETY: every buffer has the sizes the kernel is told.
            unsafe {
                batch_matmul_into(
                    batch,
                    m,
                    n,
                    k,
                    a.as_ptr(),
                    (b.as_mut_ptr(), step, transposed),
                    alpha,
                    Shared(out.as_mut_ptr()),
                    three_threads,
                )
                .unwrap();
            }
            assert_close(
                &out,
                &expected,
                &format!("batch {batch}x{m}x{n}x{k} {transposed} {shared}"),
            );
        }
    }
}
