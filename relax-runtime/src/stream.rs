//! Calls that carry state: some outputs of a function become inputs of its next call
//! (a recurrent model's hidden state, a growing key/value cache).
//!
//! A [`Stream`] owns one VM of the model and the current state tensors. A state output
//! is kept as the tensor TVM returned and handed back to TVM as the next call's input:
//! its data never passes through Rust. Before the first call, a state input holds zeros;
//! a symbolic dim of it takes its size from the same name in the other inputs (`batch`),
//! and a dim named nowhere else starts at 0 (an empty cache).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::signature::{Dim, FunctionSignature};
use crate::tensor::{checked_bytes, Tensor};
use crate::vm::{Instance, Model, Output};

/// One function of a model called again and again, its state outputs fed back as its
/// state inputs. Made by [`Session::stream`](crate::Session::stream) or the generated
/// `Model::stream()` of a model whose manifest entry declares `state`.
///
/// `Send`, not `Sync`: a stream is one sequence of calls (one conversation, one audio
/// stream); give each its own. Streams of one model share its weights.
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<relax_runtime::Stream>();
/// ```
pub struct Stream {
    model: Arc<Model>,
    /// None after TVM failed a call (that VM may hold half-made state): the next push
    /// makes a new one.
    instance: Option<Instance>,
    function: usize,
    pairs: Vec<StatePair>,
    /// The function's inputs that are not state, in argument order.
    fed: Vec<usize>,
    /// The outputs that are not state, in order.
    returned: Vec<usize>,
}

/// One state input and the output that feeds it.
struct StatePair {
    input: usize,
    output: usize,
    /// The current value; None: zeros at the next push.
    value: Option<Tensor>,
}

impl Stream {
    /// A stream of function `function` whose input `input` takes output `output` of the
    /// call before, for each `(input, output)` position pair.
    pub(crate) fn new(
        model: Arc<Model>,
        function: usize,
        state: &[(usize, usize)],
    ) -> Result<Stream> {
        let Some(signature) = model.signature.functions.get(function) else {
            return Err(Error::FunctionNotFound {
                model: model.signature.name.clone(),
                function: format!("number {function}"),
                available: format!("{} functions", model.signature.functions.len()),
            });
        };
        let refuse = |message: String| Error::Stream {
            model: model.signature.name.clone(),
            function: signature.name.clone(),
            message,
        };
        if state.is_empty() {
            return Err(refuse(
                "no state is declared: name at least one input and the output that feeds it"
                    .to_string(),
            ));
        }
        let mut pairs: Vec<StatePair> = Vec::new();
        for &(input, output) in state {
            let Some(taken) = signature.inputs.get(input) else {
                return Err(refuse(format!(
                    "it has {} inputs, no input {input}",
                    signature.inputs.len()
                )));
            };
            let Some(given) = signature.outputs.get(output) else {
                return Err(refuse(format!(
                    "it has {} outputs, no output {output}",
                    signature.outputs.len()
                )));
            };
            if pairs
                .iter()
                .any(|pair| pair.input == input || pair.output == output)
            {
                return Err(refuse(format!(
                    "input `{}` or output {output} is named twice: each state input takes one output of its own",
                    taken.name
                )));
            }
            let fits = taken.dtype == given.dtype
                && taken.shape.len() == given.shape.len()
                && taken.shape.iter().zip(&given.shape).all(|dims| match dims {
                    (Dim::Static(a), Dim::Static(b)) => a == b,
                    _ => true,
                });
            if !fits {
                return Err(refuse(format!(
                    "output {output} ({}{}) cannot be input `{}` ({}{}) of the next call",
                    given.dtype,
                    crate::signature::format_dims(&given.shape),
                    taken.name,
                    taken.dtype,
                    crate::signature::format_dims(&taken.shape),
                )));
            }
            pairs.push(StatePair {
                input,
                output,
                value: None,
            });
        }
        let fed = (0..signature.inputs.len())
            .filter(|index| pairs.iter().all(|pair| pair.input != *index))
            .collect();
        let returned = (0..signature.outputs.len())
            .filter(|index| pairs.iter().all(|pair| pair.output != *index))
            .collect();
        let instance = Instance::create(&model)?;
        Ok(Stream {
            model,
            instance: Some(instance),
            function,
            pairs,
            fed,
            returned,
        })
    }

    fn signature(&self) -> &FunctionSignature {
        &self.model.signature.functions[self.function]
    }

    fn refuse(&self, message: String) -> Error {
        Error::Stream {
            model: self.model.signature.name.clone(),
            function: self.signature().name.clone(),
            message,
        }
    }

    /// The names of the inputs [`Stream::push`] takes, in order (the function's inputs
    /// that are not state).
    pub fn input_names(&self) -> impl Iterator<Item = &str> {
        let inputs = &self.signature().inputs;
        self.fed.iter().map(|&index| inputs[index].name.as_str())
    }

    /// Calls the function with `inputs` (its inputs that are not state, in order) and
    /// the current state; keeps the state outputs for the next call and returns the
    /// others, in order.
    ///
    /// # Errors
    ///
    /// As [`Session::call`](crate::Session::call). A failed call leaves the state as it
    /// was.
    pub fn push(&mut self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        if inputs.len() != self.fed.len() {
            let names: Vec<&str> = self.input_names().collect();
            return Err(self.refuse(format!(
                "push takes {} input(s) ({}: the inputs that are not state), found {}",
                self.fed.len(),
                names.join(", "),
                inputs.len()
            )));
        }
        for index in 0..self.pairs.len() {
            if self.pairs[index].value.is_none() {
                let zeros = self.zeros(self.pairs[index].input, inputs)?;
                self.pairs[index].value = Some(zeros);
            }
        }
        let signature = self.signature();
        let mut arguments: Vec<&Tensor> = Vec::with_capacity(signature.inputs.len());
        let mut fed = inputs.iter();
        for index in 0..signature.inputs.len() {
            match self.pairs.iter().find(|pair| pair.input == index) {
                Some(pair) => arguments.push(pair.value.as_ref().expect("set above")),
                None => arguments.push(fed.next().expect("counted above")),
            }
        }
        let instance = match self.instance.take() {
            Some(instance) => instance,
            None => Instance::create(&self.model)?,
        };
        let result = instance.call(&self.model, self.function, &arguments);
        if !matches!(&result, Err(Error::Tvm { .. })) {
            self.instance = Some(instance);
        }
        let mut outputs: Vec<Option<Tensor>> = self.flatten(result?)?;
        for pair in &mut self.pairs {
            pair.value = outputs[pair.output].take();
        }
        Ok(self
            .returned
            .iter()
            .map(|&index| outputs[index].take().expect("each output is taken once"))
            .collect())
    }

    /// [`Stream::push`] for the generated code, which knows the count of the outputs
    /// that are not state.
    #[doc(hidden)]
    pub fn push_array<const N: usize>(&mut self, inputs: &[&Tensor]) -> Result<[Tensor; N]> {
        let outputs = self.push(inputs)?;
        let count = outputs.len();
        outputs.try_into().map_err(|_| Error::UnexpectedOutput {
            model: self.model.signature.name.clone(),
            function: self.signature().name.clone(),
            expected: format!("{N} outputs besides the state"),
            found: count.to_string(),
        })
    }

    /// The outputs of one call, one tensor each.
    fn flatten(&self, output: Output) -> Result<Vec<Option<Tensor>>> {
        let count = self.signature().outputs.len();
        let tensors: Vec<Option<Tensor>> = match output {
            Output::Tensor(tensor) => vec![Some(tensor)],
            Output::Tuple(items) => items.into_iter().map(Output::into_tensor).collect(),
        };
        if tensors.len() != count || tensors.iter().any(Option::is_none) {
            return Err(Error::UnexpectedOutput {
                model: self.model.signature.name.clone(),
                function: self.signature().name.clone(),
                expected: format!("{count} tensors"),
                found: format!("{} outputs, or a nested tuple", tensors.len()),
            });
        }
        Ok(tensors)
    }

    /// Zeros for state input `input`, its symbolic dims sized by the other inputs of
    /// this push (0 where no other input names them).
    fn zeros(&self, input: usize, inputs: &[&Tensor]) -> Result<Tensor> {
        let signature = self.signature();
        let taken = &signature.inputs[input];
        let mut shape = Vec::with_capacity(taken.shape.len());
        for dim in &taken.shape {
            let size = match dim {
                Dim::Static(size) => *size,
                Dim::Symbolic(name) => self.size_named(name, inputs).unwrap_or(0),
                Dim::Expression(expression) => {
                    return Err(self.refuse(format!(
                        "state input `{}` has a dim computed from others (`{expression}`), so it has no \
                         zero value of its own: give its first value with set_state before the first push",
                        taken.name
                    )))
                }
            };
            shape.push(usize::try_from(size).map_err(|_| {
                self.refuse(format!("state input `{}` has a negative dim", taken.name))
            })?);
        }
        let too_big = || {
            self.refuse(format!(
                "state input `{}`'s zeros of shape {shape:?} do not fit in memory",
                taken.name
            ))
        };
        // checked_bytes counts a zero dim as one (for the overflow check); an empty
        // tensor (a cache before its first row) has no bytes.
        checked_bytes(shape.iter().copied(), taken.dtype).ok_or_else(too_big)?;
        let elements: usize = shape.iter().product();
        let bytes = elements * taken.dtype.size_in_bytes();
        Tensor::from_bytes(taken.dtype, &shape, &vec![0; bytes])
    }

    /// The size of symbolic dim `name` in this push's other inputs.
    fn size_named(&self, name: &str, inputs: &[&Tensor]) -> Option<i64> {
        let signature = self.signature();
        self.fed.iter().zip(inputs).find_map(|(&index, tensor)| {
            let position = signature.inputs[index]
                .shape
                .iter()
                .position(|dim| matches!(dim, Dim::Symbolic(symbol) if symbol == name))?;
            tensor.shape().get(position).copied()
        })
    }

    fn pair(&self, input: &str) -> Result<usize> {
        let inputs = &self.signature().inputs;
        self.pairs
            .iter()
            .position(|pair| inputs[pair.input].name == input)
            .ok_or_else(|| {
                let names: Vec<&str> = self
                    .pairs
                    .iter()
                    .map(|pair| inputs[pair.input].name.as_str())
                    .collect();
                self.refuse(format!(
                    "`{input}` is not a state input; the state inputs are: {}",
                    names.join(", ")
                ))
            })
    }

    /// The current value of state input `input`: None before the first push and after
    /// [`Stream::reset`] (zeros at the next push).
    ///
    /// # Errors
    ///
    /// When `input` is not a state input.
    pub fn state(&self, input: &str) -> Result<Option<&Tensor>> {
        let index = self.pair(input)?;
        Ok(self.pairs[index].value.as_ref())
    }

    /// Sets state input `input` for the next push (checked against the signature then).
    ///
    /// # Errors
    ///
    /// When `input` is not a state input.
    pub fn set_state(&mut self, input: &str, value: Tensor) -> Result<()> {
        let index = self.pair(input)?;
        self.pairs[index].value = Some(value);
        Ok(())
    }

    /// Forgets the state: the next push starts from zeros, as the first did.
    pub fn reset(&mut self) {
        for pair in &mut self.pairs {
            pair.value = None;
        }
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inputs = &self.signature().inputs;
        let state: Vec<&str> = self
            .pairs
            .iter()
            .map(|pair| inputs[pair.input].name.as_str())
            .collect();
        f.debug_struct("Stream")
            .field("model", &self.model.signature.name)
            .field("function", &self.signature().name)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}
