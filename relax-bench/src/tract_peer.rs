//! tract (sonos/tract, the pure-Rust inference engine, through `tract-onnx`) on the same
//! `.onnx` file and inputs as a bench row: the second reference of the small rows.

use std::cell::RefCell;
use std::path::Path;
use std::time::{Duration, Instant};

use tract_onnx::prelude::*;

/// One input of the model, by its graph name: f32 or i64 data.
pub enum Value<'a> {
    Floats(&'a [f32]),
    Integers(&'a [i64]),
}

/// A model optimized by tract for the given input shapes, with the run state a
/// streaming app keeps from call to call (made once, as tract's own examples do).
pub struct Runner {
    state: RefCell<TypedSimpleState>,
    inputs: TVec<TValue>,
}

impl Runner {
    /// Loads `path` with `inputs` (name, shape, value) fixed, in any order.
    pub fn new(path: &Path, inputs: &[(&str, &[usize], Value<'_>)]) -> TractResult<Runner> {
        let mut model = tract_onnx::onnx().model_for_path(path)?;
        let mut ordered: Vec<Option<TValue>> = vec![None; model.input_outlets()?.len()];
        for (name, shape, value) in inputs {
            let position = model
                .input_outlets()?
                .iter()
                .position(|outlet| model.node(outlet.node).name == *name)
                .ok_or_else(|| TractError::msg(format!("the model has no input `{name}`")))?;
            // The last dim of a float input stays symbolic: with every dim fixed,
            // tract's analysis also types both branches of silero's If, and its 8 kHz
            // branch cannot take a 576-sample chunk.
            let (tensor, fact) = match value {
                Value::Floats(data) => {
                    let tensor = Tensor::from_shape(shape, data)?;
                    let fact = if shape.len() == 2 {
                        let dims = [model.symbols.sym("batch"), model.symbols.sym("samples")];
                        InferenceFact::from(f32::fact(dims.map(|dim| dim.to_dim())))
                    } else {
                        // The state: as the model declares it (its batch dim symbolic).
                        model.input_fact(position)?.clone()
                    };
                    (tensor, fact)
                }
                Value::Integers(data) => {
                    let tensor = Tensor::from_shape(shape, data)?;
                    let fact = InferenceFact::from(i64::fact(*shape));
                    (tensor, fact)
                }
            };
            model.set_input_fact(position, fact)?;
            ordered[position] = Some(tensor.into_tvalue());
        }
        let inputs = ordered
            .into_iter()
            .collect::<Option<TVec<TValue>>>()
            .ok_or_else(|| TractError::msg("an input of the model was not given"))?;
        let state = model.into_optimized()?.into_runnable()?.spawn()?;
        Ok(Runner {
            state: RefCell::new(state),
            inputs,
        })
    }

    /// The first output's values.
    pub fn first_output(&self) -> TractResult<Vec<f32>> {
        let outputs = self.state.borrow_mut().run(self.inputs.clone())?;
        Ok(outputs[0]
            .to_plain_array_view::<f32>()?
            .iter()
            .copied()
            .collect())
    }

    /// Median seconds of one run: `warmup` runs, then at least `seconds` and
    /// `min_iterations` runs (relax-bench's own rule).
    pub fn median_seconds(
        &self,
        warmup: usize,
        seconds: f64,
        min_iterations: usize,
    ) -> TractResult<f64> {
        let mut state = self.state.borrow_mut();
        for _ in 0..warmup {
            state.run(self.inputs.clone())?;
        }
        let mut times = Vec::new();
        let started = Instant::now();
        let budget = Duration::from_secs_f64(seconds);
        while started.elapsed() < budget || times.len() < min_iterations {
            let inputs = self.inputs.clone();
            let call_started = Instant::now();
            let outputs = state.run(inputs)?;
            times.push(call_started.elapsed());
            drop(outputs);
        }
        times.sort();
        Ok(times[times.len() / 2].as_secs_f64())
    }
}
