//! Winograd convolutions against a naive 3x3 convolution, split over three OS threads.

use super::*;
use crate::parallel::{test_values, three_threads};

/// A 3x3, stride-1 convolution by its definition (in f64).
fn naive(plan: &Plan, x: &[f32], w: &[f32]) -> Vec<f32> {
    let (oh, ow) = (plan.output_height, plan.output_width);
    let mut out = vec![0f32; plan.batch * plan.filters * oh * ow];
    for n in 0..plan.batch {
        for o in 0..plan.filters {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut sum = 0f64;
                    for c in 0..plan.channels {
                        for ky in 0..3 {
                            for kx in 0..3 {
                                let y = (oy + ky) as isize - plan.pad_top as isize;
                                let xx = (ox + kx) as isize - plan.pad_left as isize;
                                if y < 0
                                    || xx < 0
                                    || y as usize >= plan.height
                                    || xx as usize >= plan.width
                                {
                                    continue;
                                }
                                let input = x[((n * plan.channels + c) * plan.height + y as usize)
                                    * plan.width
                                    + xx as usize];
                                let weight = w[((o * plan.channels + c) * 3 + ky) * 3 + kx];
                                sum += input as f64 * weight as f64;
                            }
                        }
                    }
                    out[((n * plan.filters + o) * oh + oy) * ow + ox] = sum as f32;
                }
            }
        }
    }
    out
}

fn plan(
    batch: usize,
    channels: usize,
    size: (usize, usize),
    filters: usize,
    pads: [usize; 4],
) -> Plan {
    let [top, left, bottom, right] = pads;
    Plan {
        batch,
        channels,
        height: size.0,
        width: size.1,
        filters,
        pad_top: top,
        pad_left: left,
        output_height: size.0 + top + bottom - 2,
        output_width: size.1 + left + right - 2,
        tile: Tile::Two,
    }
}

/// The plan's convolution of `x` with transformed kernels `u`, on three threads (the
/// output starts as NaN, so a pixel left unwritten shows).
fn run(plan: &Plan, x: &[f32], u: &[f32], finish: Finish<'_>) -> Vec<f32> {
    let mut out =
        vec![f32::NAN; plan.batch * plan.filters * plan.output_height * plan.output_width];
    assert_eq!(
        x.len(),
        plan.batch * plan.channels * plan.height * plan.width
    );
    assert_eq!(u.len(), plan.tile.values() * plan.channels * plan.filters);
    // SAFETY: the buffers have the plan's sizes (checked above).
    unsafe {
        winograd_into(
            plan,
            x.as_ptr(),
            u.as_ptr(),
            Shared(out.as_mut_ptr()),
            finish,
            three_threads,
        )
    }
    .unwrap();
    out
}

#[test]
fn winograd_matches_a_naive_convolution() {
    let cases = [
        // ResNet's shape at a small size, odd output sizes, no padding, uneven padding,
        // more filters than a block, one channel, a batch with several blocks per image.
        plan(1, 16, (8, 8), 16, [1, 1, 1, 1]),
        plan(2, 3, (7, 9), 5, [1, 1, 1, 1]),
        plan(1, 4, (6, 5), 3, [0, 0, 0, 0]),
        plan(1, 5, (5, 6), 7, [2, 0, 1, 2]),
        plan(1, 8, (9, 9), 130, [1, 1, 1, 1]),
        plan(1, 1, (3, 3), 1, [0, 0, 0, 0]),
        plan(3, 64, (30, 30), 8, [1, 1, 1, 1]),
        // 14 tile rows split by rows over 3 tasks: a task's rows span both images.
        plan(2, 4, (14, 14), 5, [1, 1, 1, 1]),
    ];

    for plan in cases
        .into_iter()
        .flat_map(|plan| [Tile::Two, Tile::Four].map(|tile| Plan { tile, ..plan }))
    {
        let x = test_values(
            plan.batch * plan.channels * plan.height * plan.width,
            1,
            1.0,
        );
        let w = test_values(plan.filters * plan.channels * 9, 2, 1.0);
        let u = transform_weights(&w, plan.filters, plan.channels, plan.tile);
        let expected = naive(&plan, &x, &w);
        let out = run(&plan, &x, &u, &|_, _, _, _| {});
        for (index, (actual, expected)) in out.iter().zip(&expected).enumerate() {
            let bound = 1e-5 * (1.0 + (plan.channels * 9) as f32).sqrt() * 4.0;
            assert!(
                (actual - expected).abs() <= bound,
                "{plan:?}: element {index}: {actual} vs {expected}"
            );
        }
    }
}

#[test]
fn finish_sees_every_output_pixel_once_in_row_runs() {
    for tile in [Tile::Two, Tile::Four] {
        let plan = Plan {
            tile,
            ..plan(2, 2, (5, 7), 3, [1, 1, 1, 1])
        };
        let x = test_values(
            plan.batch * plan.channels * plan.height * plan.width,
            3,
            1.0,
        );
        let w = test_values(plan.filters * plan.channels * 9, 4, 1.0);
        let u = transform_weights(&w, 3, 2, tile);
        let seen = std::sync::Mutex::new(Vec::new());
        let finish = |image: usize, filter: usize, pixel: usize, values: &mut [f32]| {
            assert_eq!(values.len(), plan.output_width);
            assert_eq!(pixel % plan.output_width, 0);
            values.iter_mut().for_each(|value| *value = 1.0);
            seen.lock().unwrap().push((image, filter, pixel));
        };
        let out = run(&plan, &x, &u, &finish);
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        let expected: Vec<_> = (0..2)
            .flat_map(|image| {
                (0..3).flat_map(move |filter| (0..5).map(move |row| (image, filter, row * 7)))
            })
            .collect();
        assert_eq!(seen, expected, "{tile:?}");
        assert!(out.iter().all(|&value| value == 1.0));
    }
}
