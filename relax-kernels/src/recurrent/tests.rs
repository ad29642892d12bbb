//! Recurrent layers against double-precision loops written from ONNX's equations, split
//! over three OS threads.

// The reference indexes every tensor as the equations do.
#![allow(clippy::needless_range_loop)]

use super::*;
use crate::parallel::{test_values, three_threads};

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn activate(activation: Activation, x: f64) -> f64 {
    match activation {
        Activation::Tanh => x.tanh(),
        Activation::Sigmoid => sigmoid(x),
        Activation::Relu => x.max(0.0),
        Activation::HardSigmoid { alpha, beta } => (alpha as f64 * x + beta as f64).clamp(0.0, 1.0),
        Activation::LeakyRelu { alpha } => {
            if x < 0.0 {
                alpha as f64 * x
            } else {
                x
            }
        }
        other => panic!("the reference has no {other:?}"),
    }
}

/// The reference's results: y, y_h, y_c.
type Results = (Vec<f64>, Vec<f64>, Vec<f64>);

/// One layer computed step by step with every index written out.
fn reference(layer: &Layer, sizes: Sizes, inputs: &Inputs<'_>) -> Results {
    let Sizes {
        steps,
        batch,
        hidden,
    } = sizes;
    let directions = layer.direction.count();
    let gates = layer.kind.gates();
    let per_direction = layer.kind.activations();
    let mut y = vec![0f64; steps * directions * batch * hidden];
    let mut y_h = vec![0f64; directions * batch * hidden];
    let mut y_c = vec![0f64; directions * batch * hidden];
    let clip = |x: f64| match layer.clip {
        Some(limit) => x.clamp(-limit as f64, limit as f64),
        None => x,
    };
    for d in 0..directions {
        let act = |index: usize, x: f64| activate(layer.activations[d * per_direction + index], x);
        for b in 0..batch {
            let state = (d * batch + b) * hidden;
            let mut h: Vec<f64> = inputs.h0[state..state + hidden]
                .iter()
                .map(|&v| v as f64)
                .collect();
            let mut c: Vec<f64> = inputs.c0[state..state + hidden]
                .iter()
                .map(|&v| v as f64)
                .collect();
            let length = inputs.lengths[b];
            let order: Vec<usize> = if layer.direction.reversed(d) {
                (0..length).rev().collect()
            } else {
                (0..length).collect()
            };
            for t in order {
                // x·Wᵀ + Wb (given) for gate g, unit j.
                let x = |g: usize, j: usize| {
                    inputs.xw[((d * steps + t) * batch + b) * gates * hidden + g * hidden + j]
                        as f64
                };
                // v·R_gᵀ + Rb_g for unit j.
                let rec = |g: usize, j: usize, v: &[f64]| {
                    let row = (d * gates * hidden + g * hidden + j) * hidden;
                    let sum: f64 = (0..hidden).map(|k| inputs.r[row + k] as f64 * v[k]).sum();
                    sum + inputs.rb[d * gates * hidden + g * hidden + j] as f64
                };
                let mut next = vec![0f64; hidden];
                match layer.kind {
                    Kind::Rnn => {
                        for j in 0..hidden {
                            next[j] = act(0, clip(x(0, j) + rec(0, j, &h)));
                        }
                    }
                    Kind::Gru => {
                        let z: Vec<f64> = (0..hidden)
                            .map(|j| act(0, clip(x(0, j) + rec(0, j, &h))))
                            .collect();
                        let r: Vec<f64> = (0..hidden)
                            .map(|j| act(0, clip(x(1, j) + rec(1, j, &h))))
                            .collect();
                        let reset_h: Vec<f64> = (0..hidden).map(|j| r[j] * h[j]).collect();
                        for j in 0..hidden {
                            let candidate = if layer.linear_before_reset {
                                act(1, clip(x(2, j) + r[j] * rec(2, j, &h)))
                            } else {
                                act(1, clip(x(2, j) + rec(2, j, &reset_h)))
                            };
                            next[j] = (1.0 - z[j]) * candidate + z[j] * h[j];
                        }
                    }
                    Kind::Lstm => {
                        let p = |index: usize, j: usize| {
                            inputs.peepholes[d * 3 * hidden + index * hidden + j] as f64
                        };
                        for j in 0..hidden {
                            let i = act(0, clip(x(0, j) + rec(0, j, &h) + p(0, j) * c[j]));
                            let f = if layer.input_forget {
                                1.0 - i
                            } else {
                                act(0, clip(x(2, j) + rec(2, j, &h) + p(2, j) * c[j]))
                            };
                            let candidate = act(1, clip(x(3, j) + rec(3, j, &h)));
                            let cell = f * c[j] + i * candidate;
                            let o = act(0, clip(x(1, j) + rec(1, j, &h) + p(1, j) * cell));
                            c[j] = cell;
                            next[j] = o * act(2, cell);
                        }
                    }
                }
                h = next;
                let at = ((t * directions + d) * batch + b) * hidden;
                y[at..at + hidden].copy_from_slice(&h);
            }
            y_h[state..state + hidden].copy_from_slice(&h);
            y_c[state..state + hidden].copy_from_slice(&c);
        }
    }
    (y, y_h, y_c)
}

/// Runs `layer` on seeded values through the kernel and the reference, and compares.
fn check(layer: Layer, sizes: Sizes, lengths: Vec<usize>) {
    let Sizes {
        steps,
        batch,
        hidden,
    } = sizes;
    let directions = layer.direction.count();
    let width = layer.kind.gates() * hidden;
    let states = directions * batch * hidden;
    let peephole_count = directions * 3 * hidden;
    let xw = test_values(directions * steps * batch * width, 1, 1.5);
    let r = test_values(directions * width * hidden, 2, 0.4);
    // The kernel's layout: each direction's [G*H][H] transposed.
    let mut columns = vec![0f32; r.len()];
    for (direction, weights) in r.chunks_exact(width * hidden).enumerate() {
        for (row, values) in weights.chunks_exact(hidden).enumerate() {
            for (k, &value) in values.iter().enumerate() {
                columns[(direction * hidden + k) * width + row] = value;
            }
        }
    }
    let rb = test_values(directions * width, 3, 0.5);
    let peepholes = test_values(peephole_count, 4, 0.5);
    let h0 = test_values(states, 5, 1.0);
    let c0 = test_values(states, 6, 1.0);
    let inputs = Inputs {
        xw: &xw,
        r: &r,
        rb: &rb,
        peepholes: &peepholes,
        lengths: &lengths,
        h0: &h0,
        c0: &c0,
    };
    let mut y = vec![f32::NAN; steps * states];
    let mut y_h = vec![f32::NAN; states];
    let mut y_c = vec![f32::NAN; states];
    let outputs = Outputs {
        y: &mut y,
        y_h: &mut y_h,
        y_c: &mut y_c,
    };
    let transposed = Inputs {
        r: &columns,
        ..inputs
    };
    run(&layer, sizes, &transposed, outputs, three_threads).unwrap();
    let (want_y, want_h, want_c) = reference(&layer, sizes, &inputs);
    for (name, got, want) in [
        ("y", &y, &want_y),
        ("y_h", &y_h, &want_h),
        ("y_c", &y_c, &want_c),
    ] {
        if layer.kind != Kind::Lstm && name == "y_c" {
            continue;
        }
        for (index, (got, want)) in got.iter().zip(want).enumerate() {
            assert!(
                (*got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "{:?} {name}[{index}]: {got} vs {want}",
                layer.kind
            );
        }
    }
}

fn layer(kind: Kind, direction: Direction) -> Layer {
    let activations = match kind {
        Kind::Rnn => vec![Activation::Tanh],
        Kind::Gru => vec![Activation::Sigmoid, Activation::Tanh],
        Kind::Lstm => vec![Activation::Sigmoid, Activation::Tanh, Activation::Tanh],
    };
    let activations = activations.repeat(direction.count());
    Layer {
        kind,
        direction,
        linear_before_reset: false,
        input_forget: false,
        clip: None,
        activations,
    }
}

const SIZES: Sizes = Sizes {
    steps: 7,
    batch: 3,
    hidden: 13,
};

#[test]
fn every_kind_and_direction_matches_the_equations() {
    for kind in [Kind::Rnn, Kind::Gru, Kind::Lstm] {
        for direction in [
            Direction::Forward,
            Direction::Reverse,
            Direction::Bidirectional,
        ] {
            check(layer(kind, direction), SIZES, vec![7, 7, 7]);
        }
    }
}

#[test]
fn shorter_rows_leave_zeros_and_keep_their_last_state() {
    for kind in [Kind::Gru, Kind::Lstm] {
        // A row of no steps keeps its initial state.
        check(layer(kind, Direction::Bidirectional), SIZES, vec![7, 2, 0]);
    }
}

#[test]
fn gru_linear_before_reset_matches() {
    let mut gru = layer(Kind::Gru, Direction::Bidirectional);
    gru.linear_before_reset = true;
    check(gru, SIZES, vec![7, 5, 1]);
}

#[test]
fn lstm_clip_coupled_gates_and_other_activations_match() {
    let mut lstm = layer(Kind::Lstm, Direction::Bidirectional);
    lstm.clip = Some(0.7);
    lstm.input_forget = true;
    lstm.activations = vec![
        Activation::HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        },
        Activation::LeakyRelu { alpha: 0.1 },
        Activation::Tanh,
        Activation::Sigmoid,
        Activation::Relu,
        Activation::Tanh,
    ];
    check(lstm, SIZES, vec![7, 6, 3]);
}

#[test]
fn a_wide_hidden_state_uses_the_vector_lanes_and_their_tail() {
    let sizes = Sizes {
        steps: 4,
        batch: 2,
        hidden: 67,
    };
    check(layer(Kind::Lstm, Direction::Forward), sizes, vec![4, 3]);
}

#[test]
fn lengths_must_be_whole_steps_within_the_sequence() {
    let sizes = Sizes {
        steps: 5,
        batch: 2,
        hidden: 1,
    };
    assert_eq!(row_lengths(&[], sizes).unwrap(), vec![5, 5]);
    assert_eq!(row_lengths(&[0.0, 5.0], sizes).unwrap(), vec![0, 5]);
    for bad in [6.0, -1.0, 2.5, f32::NAN] {
        let error = row_lengths(&[1.0, bad], sizes).unwrap_err();
        assert!(error.contains("sequence_lens[1]"), "{error}");
    }
}

#[test]
fn unknown_codes_are_refused() {
    assert!(Kind::from_code(3).unwrap_err().contains("kind 3"));
    assert!(Direction::from_code(-1)
        .unwrap_err()
        .contains("direction -1"));
    assert!(Activation::from_code(11, 0.0, 0.0)
        .unwrap_err()
        .contains("code 11"));
}

#[test]
fn tensors_of_other_shapes_are_named_with_the_shape_expected() {
    let lstm = layer(Kind::Lstm, Direction::Forward);
    let sizes = Sizes {
        steps: 2,
        batch: 1,
        hidden: 3,
    };
    // check_shapes reads only the shapes.
    let mut nothing = [0f32; 1];
    let data = nothing.as_mut_ptr();
    let view = |shape: &'static [i64]| View::of(data, shape);
    let inputs = [
        view(&[1, 2, 1, 12]),
        view(&[1, 3, 12]),
        view(&[1, 12]),
        view(&[1, 8]),
        view(&[0]),
        view(&[1, 1, 3]),
        view(&[1, 1, 3]),
    ];
    let (y, state) = (view(&[2, 1, 1, 3]), view(&[1, 1, 3]));
    let error = check_shapes(&lstm, sizes, &inputs, [&y, &state, &state]).unwrap_err();
    assert!(
        error.starts_with("p has shape [1, 8], expected [1, 9]"),
        "{error}"
    );
    let mut fixed = inputs;
    fixed[3] = view(&[1, 9]);
    check_shapes(&lstm, sizes, &fixed, [&y, &state, &state]).unwrap();
    // R in ONNX's layout, not transposed, is refused.
    fixed[1] = view(&[1, 12, 3]);
    let error = check_shapes(&lstm, sizes, &fixed, [&y, &state, &state]).unwrap_err();
    assert!(
        error.starts_with("r has shape [1, 12, 3], expected [1, 3, 12]"),
        "{error}"
    );
}
