//! The kernels called from several threads at once, each call itself split over
//! threads, give what one call alone gives.

use relax_kernels::{inline, kernel, threads, Argument, Arguments, Launch};

/// Deterministic values in [-1, 1).
fn values(count: usize, seed: u64) -> Vec<f32> {
    relax_kernels::test_values(count, seed, 1.0)
}

/// `relax_runtime.dense_bias` with ReLU of x[37, 96] and w[70, 96] (transposed).
fn dense(x: &[f32], w: &[f32], bias: &[f32], launch: Launch) -> Vec<f32> {
    let mut out = vec![f32::NAN; 37 * 70];
    let args = [
        Argument::input(x, &[37, 96]).unwrap(),
        Argument::input(w, &[70, 96]).unwrap(),
        Argument::input(bias, &[70]).unwrap(),
        Argument::int(1),
        Argument::int(1),
        Argument::output(&mut out, &[37, 70]).unwrap(),
    ];
    let name = "relax_runtime.dense_bias";
    kernel(name).unwrap()(&Arguments::new(name, &args, launch)).unwrap();
    out
}

/// `relax_runtime.conv2d` of x[1, 16, 20, 20] with a 3x3 kernel of 24 filters, stride 1,
/// padding 1.
fn conv(x: &[f32], w: &[f32], launch: Launch) -> Vec<f32> {
    let mut out = vec![f32::NAN; 24 * 20 * 20];
    let mut args = vec![
        Argument::input(x, &[1, 16, 20, 20]).unwrap(),
        Argument::input(w, &[24, 16, 3, 3]).unwrap(),
    ];
    args.extend([1, 1, 1, 1, 1, 1, 1, 1, 1, 0].map(Argument::int));
    args.push(Argument::output(&mut out, &[1, 24, 20, 20]).unwrap());
    let name = "relax_runtime.conv2d";
    kernel(name).unwrap()(&Arguments::new(name, &args, launch)).unwrap();
    out
}

#[test]
fn concurrent_calls_match_a_call_alone() {
    let (x, w, bias) = (values(37 * 96, 1), values(70 * 96, 2), values(70, 3));
    let (image, filters) = (values(16 * 400, 4), values(24 * 16 * 9, 5));
    let dense_alone = dense(&x, &w, &bias, inline);
    let conv_alone = conv(&image, &filters, inline);
    assert!(dense_alone
        .iter()
        .chain(&conv_alone)
        .all(|value| value.is_finite()));
    std::thread::scope(|scope| {
        for caller in 0..4 {
            let (x, w, bias, image, filters) = (&x, &w, &bias, &image, &filters);
            let (dense_alone, conv_alone) = (&dense_alone, &conv_alone);
            scope.spawn(move || {
                for round in 0..10 {
                    let launch: Launch = if (caller + round) % 2 == 0 {
                        threads::<2>
                    } else {
                        threads::<3>
                    };
                    assert_eq!(
                        &dense(x, w, bias, launch),
                        dense_alone,
                        "dense, caller {caller}"
                    );
                    let out = conv(image, filters, launch);
                    let worst = out
                        .iter()
                        .zip(conv_alone)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0f32, f32::max);
                    assert!(worst <= 1e-5, "conv2d, caller {caller}: {worst}");
                }
            });
        }
    });
}

#[test]
fn a_panic_in_a_task_is_an_error_not_an_abort() {
    let outcome = threads::<2>(false, &|task, _| {
        if task == 1 {
            panic!("task 1 fails");
        }
    });
    assert!(outcome.is_err());
}
