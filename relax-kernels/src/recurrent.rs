//! Recurrent layers (ONNX's RNN, GRU and LSTM) over a sequence whose length is known
//! only at run time: the driver computes the input projection of every step as one
//! matrix multiplication (`xw`, the `W` bias included), and this kernel runs the steps,
//! each a product of the hidden state with the recurrence weights, then the gates.
//!
//! `relax_runtime.recurrent(xw[D, T, B, G*H], r[D, H, G*H], rb[D, G*H], p[D, 3H],
//! lengths[B or 0], h0[D, B, H], c0[D, B, H], kind, direction, linear_before_reset,
//! input_forget, clip, (code, alpha, beta) per activation, y[T, D, B, H], y_h[D, B, H],
//! y_c[D, B, H])`: `G` is 1 (RNN), 3 (GRU: z, r, h) or 4 (LSTM: i, o, f, c), in ONNX's
//! gate order; `r` is ONNX's `R` transposed in each direction (the driver transposes a
//! constant `R` once, at import), so that a step reads it row after row, each row's
//! values multiplied by one value of the hidden state; `D` is 2 for a bidirectional layer; `p` holds an LSTM's peepholes (i, o,
//! f; zeros, unread, for the other kinds); `lengths` (float32, whole numbers)
//! gives each batch row's steps, every row running all `T` when it is empty; the
//! activations are ONNX's per direction, in its order (LSTM f, g, h; GRU f, g; RNN f).
//! Steps past a row's length leave zeros in `y`; `y_h` and `y_c` hold the state after
//! a row's last step (the initial state for a row of no steps).
//!
//! The sequences of the batch rows and directions are independent: they are split over
//! the pool, each run on its own thread from start to end.

use std::sync::Mutex;

use super::parallel::Launch;
use super::simd::{exp_with, multiversion};
use super::tensor::{Arguments, View};

/// The recurrent layer kinds, by the code the driver passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Rnn,
    Gru,
    Lstm,
}

impl Kind {
    fn from_code(code: i64) -> Result<Kind, String> {
        match code {
            0 => Ok(Kind::Rnn),
            1 => Ok(Kind::Gru),
            2 => Ok(Kind::Lstm),
            other => Err(format!(
                "unknown recurrent layer kind {other} (0 RNN, 1 GRU, 2 LSTM)"
            )),
        }
    }

    /// Gates per hidden unit.
    fn gates(self) -> usize {
        match self {
            Kind::Rnn => 1,
            Kind::Gru => 3,
            Kind::Lstm => 4,
        }
    }

    /// Activations per direction.
    fn activations(self) -> usize {
        match self {
            Kind::Rnn => 1,
            Kind::Gru => 2,
            Kind::Lstm => 3,
        }
    }
}

/// ONNX's recurrent activation functions, with their alpha and beta where they take them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Activation {
    Relu,
    Tanh,
    Sigmoid,
    Affine { alpha: f32, beta: f32 },
    LeakyRelu { alpha: f32 },
    ThresholdedRelu { alpha: f32 },
    ScaledTanh { alpha: f32, beta: f32 },
    HardSigmoid { alpha: f32, beta: f32 },
    Elu { alpha: f32 },
    Softsign,
    Softplus,
}

impl Activation {
    /// The activation of the driver's code (see the driver's `recurrent` converters).
    pub(crate) fn from_code(code: i64, alpha: f32, beta: f32) -> Result<Activation, String> {
        Ok(match code {
            0 => Activation::Relu,
            1 => Activation::Tanh,
            2 => Activation::Sigmoid,
            3 => Activation::Affine { alpha, beta },
            4 => Activation::LeakyRelu { alpha },
            5 => Activation::ThresholdedRelu { alpha },
            6 => Activation::ScaledTanh { alpha, beta },
            7 => Activation::HardSigmoid { alpha, beta },
            8 => Activation::Elu { alpha },
            9 => Activation::Softsign,
            10 => Activation::Softplus,
            other => return Err(format!("unknown activation code {other}")),
        })
    }

    fn apply(self, x: f32) -> f32 {
        match self {
            Activation::Relu => x.max(0.0),
            Activation::Tanh => x.tanh(),
            Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Activation::Affine { alpha, beta } => alpha * x + beta,
            Activation::LeakyRelu { alpha } => {
                if x >= 0.0 {
                    x
                } else {
                    alpha * x
                }
            }
            Activation::ThresholdedRelu { alpha } => {
                if x > alpha {
                    x
                } else {
                    0.0
                }
            }
            Activation::ScaledTanh { alpha, beta } => alpha * (beta * x).tanh(),
            Activation::HardSigmoid { alpha, beta } => (alpha * x + beta).clamp(0.0, 1.0),
            Activation::Elu { alpha } => {
                if x >= 0.0 {
                    x
                } else {
                    alpha * (x.exp() - 1.0)
                }
            }
            Activation::Softsign => x / (1.0 + x.abs()),
            Activation::Softplus => x.exp().ln_1p(),
        }
    }
}

/// Which way the layer reads the sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    Forward,
    Reverse,
    Bidirectional,
}

impl Direction {
    fn from_code(code: i64) -> Result<Direction, String> {
        match code {
            0 => Ok(Direction::Forward),
            1 => Ok(Direction::Reverse),
            2 => Ok(Direction::Bidirectional),
            other => Err(format!(
                "unknown direction {other} (0 forward, 1 reverse, 2 bidirectional)"
            )),
        }
    }

    fn count(self) -> usize {
        if self == Direction::Bidirectional {
            2
        } else {
            1
        }
    }

    /// Whether direction `index` reads the sequence from its end.
    fn reversed(self, index: usize) -> bool {
        self == Direction::Reverse || (self == Direction::Bidirectional && index == 1)
    }
}

/// A layer's attributes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Layer {
    pub(crate) kind: Kind,
    pub(crate) direction: Direction,
    /// GRU: the reset gate scales `h·Rₕᵀ + Rbₕ` instead of `h`.
    pub(crate) linear_before_reset: bool,
    /// LSTM: the forget gate is `1 - input gate`.
    pub(crate) input_forget: bool,
    /// Gate inputs are clamped to `[-clip, clip]` when set.
    pub(crate) clip: Option<f32>,
    /// Per direction, `kind.activations()` of them.
    pub(crate) activations: Vec<Activation>,
}

/// The sizes of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sizes {
    pub(crate) steps: usize,
    pub(crate) batch: usize,
    pub(crate) hidden: usize,
}

/// One call's inputs, as slices of the shapes the module docs give.
#[derive(Clone, Copy)]
pub(crate) struct Inputs<'a> {
    pub(crate) xw: &'a [f32],
    pub(crate) r: &'a [f32],
    pub(crate) rb: &'a [f32],
    /// An LSTM's peepholes (read by no other kind).
    pub(crate) peepholes: &'a [f32],
    /// One length per batch row.
    pub(crate) lengths: &'a [usize],
    pub(crate) h0: &'a [f32],
    pub(crate) c0: &'a [f32],
}

/// One call's outputs.
pub(crate) struct Outputs<'a> {
    pub(crate) y: &'a mut [f32],
    pub(crate) y_h: &'a mut [f32],
    pub(crate) y_c: &'a mut [f32],
}

/// What one sequence (a batch row in one direction) produced: its hidden states, one per
/// step run, in step order (`t` from 0), and its final states.
struct Sequence {
    hidden_states: Vec<f32>,
    h: Vec<f32>,
    c: Vec<f32>,
}

/// The columns [`multiply_add`] computes at a time: sixteen AVX2 (eight AVX-512) vectors
/// of independent sums, so that the multiply-adds do not wait on one another, and the
/// loop's own work is shared by many of them (`cargo bench -p relax-kernels --
/// recurrent`: 32 columns 2.0 ms, 64 1.6, 128 1.4, 256 1.2 on AVX-512, where AVX2 would
/// run out of registers).
const COLUMN_BLOCK: usize = 128;

/// `values[i] += addend[i]`.
fn add(values: &mut [f32], addend: &[f32]) {
    for (value, addend) in values.iter_mut().zip(addend) {
        *value += addend;
    }
}

/// `values[i] += weights[i] * x[i]` (the peepholes; none when `weights` is empty).
fn multiply_add_into(values: &mut [f32], weights: &[f32], x: &[f32]) {
    for ((value, weight), x) in values.iter_mut().zip(weights).zip(x) {
        *value += weight * x;
    }
}

multiversion! {
    /// `values[i] = activation(clip(values[i]))`, a loop per activation, so that the
    /// common ones (sigmoid, tanh) vectorize.
    fn activate<const FMA: bool>(activation: Activation, clip: Option<f32>, values: &mut [f32]) {
        if let Some(limit) = clip {
            for value in values.iter_mut() {
                *value = value.clamp(-limit, limit);
            }
        }
        match activation {
            Activation::Sigmoid => {
                for value in values.iter_mut() {
                    *value = 1.0 / (1.0 + exp_with::<FMA>(-*value));
                }
            }
            Activation::Tanh => {
                for value in values.iter_mut() {
                    *value = tanh::<FMA>(*value);
                }
            }
            other => {
                for value in values.iter_mut() {
                    *value = other.apply(*value);
                }
            }
        }
    }
}

/// `tanh(x)` from [`exp_with`], without branches or calls: `(1 - e) / (1 + e)` with
/// `e = e^(-2|x|)`, signed as `x`, and `x` itself below 2^-12 in magnitude (where
/// `tanh(x) = x - x³/3` differs from `x` by under 2^-37 relative, and the quotient
/// would lose digits).
#[inline(always)]
fn tanh<const FMA: bool>(x: f32) -> f32 {
    let e = exp_with::<FMA>(-2.0 * x.abs());
    let magnitude = (1.0 - e) / (1.0 + e);
    if x.abs() < 1.0 / 4096.0 {
        x
    } else {
        magnitude.copysign(x)
    }
}

/// The recurrence weights of one direction, `[H][G*H]` (see the module docs).
struct Columns<'a> {
    values: &'a [f32],
    width: usize,
}

impl Columns<'_> {
    /// `out[j] = bias[j] + Σ_k h[k] · r[k][first + j]`.
    fn multiply_add(&self, first: usize, h: &[f32], bias: &[f32], out: &mut [f32]) {
        multiply_add(self.values, self.width, first, h, bias, out);
    }
}

multiversion! {
    /// `out[j] = bias[j] + Σ_k h[k] · columns[k * stride + first + j]`, in blocks of
    /// [`COLUMN_BLOCK`] columns.
    fn multiply_add(columns: &[f32], stride: usize, first: usize, h: &[f32], bias: &[f32], out: &mut [f32]) {
        for (block, (out, bias)) in out.chunks_mut(COLUMN_BLOCK).zip(bias.chunks(COLUMN_BLOCK)).enumerate() {
            let start = first + block * COLUMN_BLOCK;
            if let (Ok(out), Ok(bias)) = (<&mut [f32; COLUMN_BLOCK]>::try_from(&mut *out), <&[f32; COLUMN_BLOCK]>::try_from(bias)) {
                let mut sums = *bias;
                for (k, &value) in h.iter().enumerate() {
                    let row = <&[f32; COLUMN_BLOCK]>::try_from(&columns[k * stride + start..][..COLUMN_BLOCK])
                        .expect("a slice of COLUMN_BLOCK values");
                    for lane in 0..COLUMN_BLOCK {
                        sums[lane] = row[lane].mul_add(value, sums[lane]);
                    }
                }
                *out = sums;
            } else {
                out.copy_from_slice(bias);
                for (k, &value) in h.iter().enumerate() {
                    let row = &columns[k * stride + start..][..out.len()];
                    for (sum, &weight) in out.iter_mut().zip(row) {
                        *sum = weight.mul_add(value, *sum);
                    }
                }
            }
        }
    }
}

/// Runs the layer, splitting its sequences over `launch`'s tasks.
pub(crate) fn run(
    layer: &Layer,
    sizes: Sizes,
    inputs: &Inputs<'_>,
    outputs: Outputs<'_>,
    launch: Launch,
) -> Result<(), String> {
    let Sizes {
        steps,
        batch,
        hidden,
    } = sizes;
    let directions = layer.direction.count();
    let units = directions * batch;
    let results: Vec<Mutex<Option<Sequence>>> = (0..units).map(|_| Mutex::new(None)).collect();
    let work = steps * units * layer.kind.gates() * hidden * hidden;
    launch(work < 1 << 16, &|task, tasks| {
        for unit in (task..units).step_by(tasks) {
            let sequence = run_sequence(layer, sizes, inputs, unit / batch, unit % batch);
            *results[unit].lock().unwrap_or_else(|e| e.into_inner()) = Some(sequence);
        }
    })?;
    outputs.y.fill(0.0);
    for (unit, result) in results.into_iter().enumerate() {
        let sequence = result
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .ok_or("a recurrent sequence was not run")?;
        let (direction, row) = (unit / batch, unit % batch);
        for (t, state) in sequence
            .hidden_states
            .chunks_exact(hidden.max(1))
            .enumerate()
        {
            let at = ((t * directions + direction) * batch + row) * hidden;
            outputs.y[at..at + hidden].copy_from_slice(state);
        }
        let at = unit * hidden;
        outputs.y_h[at..at + hidden].copy_from_slice(&sequence.h);
        outputs.y_c[at..at + hidden].copy_from_slice(&sequence.c);
    }
    Ok(())
}

/// Runs batch row `row` of direction `direction` over its steps.
fn run_sequence(
    layer: &Layer,
    sizes: Sizes,
    inputs: &Inputs<'_>,
    direction: usize,
    row: usize,
) -> Sequence {
    let Sizes {
        steps,
        batch,
        hidden,
    } = sizes;
    let gates = layer.kind.gates();
    let width = gates * hidden;
    let state = (direction * batch + row) * hidden;
    let mut h = inputs.h0[state..state + hidden].to_vec();
    let mut c = inputs.c0[state..state + hidden].to_vec();
    let r = Columns {
        values: &inputs.r[direction * width * hidden..(direction + 1) * width * hidden],
        width,
    };
    let rb = &inputs.rb[direction * width..(direction + 1) * width];
    let activations = &layer.activations
        [direction * layer.kind.activations()..(direction + 1) * layer.kind.activations()];
    let peepholes = match layer.kind {
        Kind::Lstm => Some(&inputs.peepholes[direction * 3 * hidden..(direction + 1) * 3 * hidden]),
        _ => None,
    };
    let length = inputs.lengths[row];
    let mut hidden_states = vec![0f32; length * hidden];
    let mut recurrent = vec![0f32; width];
    let mut scratch = vec![0f32; hidden];
    for step in 0..length {
        let t = if layer.direction.reversed(direction) {
            length - 1 - step
        } else {
            step
        };
        let at = ((direction * steps + t) * batch + row) * width;
        let xw = &inputs.xw[at..at + width];
        let clip = layer.clip;
        match layer.kind {
            Kind::Rnn => {
                r.multiply_add(0, &h, rb, &mut recurrent);
                add(&mut recurrent, xw);
                activate(activations[0], clip, &mut recurrent);
                h.copy_from_slice(&recurrent);
            }
            Kind::Gru => {
                let (f, g) = (activations[0], activations[1]);
                // z and r from their rows; then the candidate from the h rows.
                r.multiply_add(0, &h, &rb[..2 * hidden], &mut recurrent[..2 * hidden]);
                let (z_r, candidate) = recurrent.split_at_mut(2 * hidden);
                add(z_r, &xw[..2 * hidden]);
                activate(f, clip, z_r);
                let (update, reset) = z_r.split_at(hidden);
                let rb_h = &rb[2 * hidden..];
                if layer.linear_before_reset {
                    r.multiply_add(2 * hidden, &h, rb_h, candidate);
                    for ((slot, reset), x) in candidate.iter_mut().zip(reset).zip(&xw[2 * hidden..])
                    {
                        *slot = x + reset * *slot;
                    }
                } else {
                    for ((slot, reset), h) in scratch.iter_mut().zip(reset).zip(&h) {
                        *slot = reset * h;
                    }
                    r.multiply_add(2 * hidden, &scratch, rb_h, candidate);
                    add(candidate, &xw[2 * hidden..]);
                }
                activate(g, clip, candidate);
                for ((h, update), candidate) in h.iter_mut().zip(update).zip(candidate.iter()) {
                    *h = (1.0 - update) * candidate + update * *h;
                }
            }
            Kind::Lstm => {
                let (f, g, output_activation) = (activations[0], activations[1], activations[2]);
                let peepholes = peepholes.unwrap_or_default();
                let (p_input, rest) = peepholes.split_at(hidden.min(peepholes.len()));
                let (p_output, p_forget) = rest.split_at(hidden.min(rest.len()));
                r.multiply_add(0, &h, rb, &mut recurrent);
                add(&mut recurrent, xw);
                // Gates i, o, f, c (ONNX's order), each `hidden` long.
                let (input, rest) = recurrent.split_at_mut(hidden);
                let (output, rest) = rest.split_at_mut(hidden);
                let (forget, cell) = rest.split_at_mut(hidden);
                multiply_add_into(input, p_input, &c);
                activate(f, clip, input);
                if layer.input_forget {
                    for (forget, input) in forget.iter_mut().zip(input.iter()) {
                        *forget = 1.0 - input;
                    }
                } else {
                    multiply_add_into(forget, p_forget, &c);
                    activate(f, clip, forget);
                }
                activate(g, clip, cell);
                for (((c, forget), input), cell) in c
                    .iter_mut()
                    .zip(forget.iter())
                    .zip(input.iter())
                    .zip(cell.iter())
                {
                    *c = forget * *c + input * cell;
                }
                multiply_add_into(output, p_output, &c);
                activate(f, clip, output);
                scratch.copy_from_slice(&c);
                activate(output_activation, None, &mut scratch);
                for ((h, output), value) in h.iter_mut().zip(output.iter()).zip(&scratch) {
                    *h = output * value;
                }
            }
        }
        hidden_states[t * hidden..(t + 1) * hidden].copy_from_slice(&h);
    }
    Sequence {
        hidden_states,
        h,
        c,
    }
}

/// The number of fixed arguments before the activations' triples.
const FIXED_ARGUMENTS: usize = 12;

/// `relax_runtime.recurrent`: see the module docs.
pub(crate) fn recurrent(args: &Arguments<'_>) -> Result<(), String> {
    let name = args.name;
    let kind = Kind::from_code(args.int(7)?).map_err(|e| format!("{name}: {e}"))?;
    let direction = Direction::from_code(args.int(8)?).map_err(|e| format!("{name}: {e}"))?;
    let directions = direction.count();
    let activation_count = directions * kind.activations();
    args.expect_count(FIXED_ARGUMENTS + 3 * activation_count + 3)?;
    let clip = args.float(11)? as f32;
    let activations = (0..activation_count)
        .map(|index| {
            let at = FIXED_ARGUMENTS + 3 * index;
            Activation::from_code(
                args.int(at)?,
                args.float(at + 1)? as f32,
                args.float(at + 2)? as f32,
            )
        })
        .collect::<Result<Vec<_>, String>>()
        .map_err(|e| format!("{name}: {e}"))?;
    let layer = Layer {
        kind,
        direction,
        linear_before_reset: args.int(9)? != 0,
        input_forget: args.int(10)? != 0,
        clip: (clip > 0.0).then_some(clip),
        activations,
    };
    let outputs_at = FIXED_ARGUMENTS + 3 * activation_count;
    let views = [
        args.tensor(0, Some(4))?,
        args.tensor(1, Some(3))?,
        args.tensor(2, Some(2))?,
        args.tensor(3, Some(2))?,
        args.tensor(4, Some(1))?,
        args.tensor(5, Some(3))?,
        args.tensor(6, Some(3))?,
    ];
    let [xw, r, rb, p, lengths, h0, c0] = views;
    let [y, y_h, y_c] = [
        args.output(outputs_at, Some(4))?,
        args.output(outputs_at + 1, Some(3))?,
        args.output(outputs_at + 2, Some(3))?,
    ];
    let sizes = Sizes {
        steps: xw.shape[1] as usize,
        batch: xw.shape[2] as usize,
        hidden: h0.shape[2] as usize,
    };
    check_shapes(&layer, sizes, &views, [&y, &y_h, &y_c]).map_err(|e| format!("{name}: {e}"))?;
    for output in [&y, &y_h, &y_c] {
        for view in views.iter().chain([&y, &y_h, &y_c]) {
            if !std::ptr::eq(output, view) && output.len() > 0 && view.len() > 0 {
                output.check_disjoint(view)?;
            }
        }
    }
    let slice = |view: &View<'_>| -> &[f32] {
        if view.len() == 0 {
            return &[];
        }
        // SAFETY: a checked float32 tensor of the length its shape gives (so its data is
        // not null), valid for the call; no output overlaps it (checked above).
        unsafe { std::slice::from_raw_parts(view.data.cast_const(), view.len()) }
    };
    let lengths = row_lengths(slice(&lengths), sizes).map_err(|e| format!("{name}: {e}"))?;
    let inputs = Inputs {
        xw: slice(&xw),
        r: slice(&r),
        rb: slice(&rb),
        peepholes: slice(&p),
        lengths: &lengths,
        h0: slice(&h0),
        c0: slice(&c0),
    };
    let slice_mut = |view: &View<'_>| -> &mut [f32] {
        if view.len() == 0 {
            return &mut [];
        }
        // SAFETY: as above; the three outputs overlap nothing else, and each is borrowed
        // mutably once.
        unsafe { std::slice::from_raw_parts_mut(view.data, view.len()) }
    };
    let outputs = Outputs {
        y: slice_mut(&y),
        y_h: slice_mut(&y_h),
        y_c: slice_mut(&y_c),
    };
    run(&layer, sizes, &inputs, outputs, args.launch)
}

/// Fails unless the tensors have the shapes the module docs give for `layer` and `sizes`.
fn check_shapes(
    layer: &Layer,
    sizes: Sizes,
    inputs: &[View<'_>; 7],
    outputs: [&View<'_>; 3],
) -> Result<(), String> {
    let Sizes {
        steps,
        batch,
        hidden,
    } = sizes;
    let directions = layer.direction.count();
    let width = layer.kind.gates() * hidden;
    let peepholes = 3 * hidden;
    let expected: [&[usize]; 10] = [
        &[directions, steps, batch, width],
        &[directions, hidden, width],
        &[directions, width],
        &[directions, peepholes],
        &[if inputs[4].len() == 0 { 0 } else { batch }],
        &[directions, batch, hidden],
        &[directions, batch, hidden],
        &[steps, directions, batch, hidden],
        &[directions, batch, hidden],
        &[directions, batch, hidden],
    ];
    let names = [
        "xw", "r", "rb", "p", "lengths", "h0", "c0", "y", "y_h", "y_c",
    ];
    for ((view, wanted), name) in inputs.iter().chain(outputs).zip(expected).zip(names) {
        let fits = view.shape.len() == wanted.len()
            && view
                .shape
                .iter()
                .zip(wanted)
                .all(|(&dim, &want)| dim as usize == want);
        if !fits {
            return Err(format!(
                "{name} has shape {:?}, expected {wanted:?} for a {:?} layer of {directions} direction(s), \
                 {steps} steps, batch {batch}, hidden size {hidden}",
                view.shape, layer.kind
            ));
        }
    }
    Ok(())
}

/// Each batch row's step count: `lengths` (whole numbers from 0 to `steps`), or every row
/// the whole sequence when `lengths` is empty.
fn row_lengths(lengths: &[f32], sizes: Sizes) -> Result<Vec<usize>, String> {
    if lengths.is_empty() {
        return Ok(vec![sizes.steps; sizes.batch]);
    }
    lengths
        .iter()
        .enumerate()
        .map(|(row, &length)| {
            if length.fract() == 0.0 && (0.0..=sizes.steps as f32).contains(&length) {
                Ok(length as usize)
            } else {
                Err(format!(
                    "sequence_lens[{row}] is {length}, not a length from 0 to the {} steps",
                    sizes.steps
                ))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
