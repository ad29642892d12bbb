//! [`Session`]: a loaded model that any number of threads call at once.

use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::library;
use crate::locate::Hints;
use crate::private::EmbeddedModel;
use crate::profile::{self, Profile};
use crate::runtime;
use crate::signature::ModelSignature;
use crate::stream::Stream;
use crate::tensor::Tensor;
use crate::vm::{Instance, Model, Output, VirtualMachine};
use crate::weights;

/// A loaded model, shared by the threads that call it.
///
/// `Send + Sync`: put one in an `Arc` (or a `static`) and call it from every request
/// handler. The library and the weights are loaded once; each concurrent call runs on
/// a VM of its own, taken from a pool that grows to the number of calls in flight
/// (VMs are cheap: they share the library and the weights). The generated `Model` of
/// each model wraps one and names its functions as methods.
///
/// ```no_run
/// # mod digits { pub struct Model; impl Model { pub fn load() -> relax_runtime::Result<Model> { todo!() }
/// #   pub fn forward(&self, _: &relax_runtime::Tensor) -> relax_runtime::Result<relax_runtime::Tensor> { todo!() } } }
/// use std::sync::Arc;
///
/// let model = Arc::new(digits::Model::load()?);
/// let handlers: Vec<_> = (0..4)
///     .map(|_| {
///         let model = Arc::clone(&model);
///         std::thread::spawn(move || {
///             let x = relax_runtime::Tensor::from_slice(&[0f32; 64], &[1, 64])?;
///             model.forward(&x)
///         })
///     })
///     .collect();
/// for handler in handlers {
///     let logits = handler.join().unwrap()?;
/// }
/// # Ok::<(), relax_runtime::Error>(())
/// ```
pub struct Session {
    model: Arc<Model>,
    idle: Mutex<Vec<Instance>>,
}

impl Session {
    /// Loads a model embedded by `include_model!` (what the generated `Model::load` calls).
    ///
    /// Safe because only `unsafe` code makes an [`EmbeddedModel`]: its constructor's
    /// contract vouches for the library.
    #[doc(hidden)]
    pub fn load_embedded(embedded: &'static EmbeddedModel, device: Device) -> Result<Session> {
        runtime::load(&embedded.hints())?;
        let parts = embedded.parts();
        let signature = ModelSignature::from_json(parts.name, parts.signature_json)?;
        let library = library::load_embedded(parts.name, parts.library, parts.library_sha256)?;
        Session::new(library, signature, parts.weights, device)
    }

    /// Loads a model from a library file compiled by relax-build, with its signature
    /// JSON (`signature.json` next to it) and weights (`weights.safetensors`, if any).
    ///
    /// TVM's runtime libraries are looked for as the crate docs describe.
    ///
    /// # Safety
    ///
    /// Loading a library runs its native code. `library` must be a model library
    /// compiled by relax-build for this machine's target and for `signature_json`, and
    /// must not change while the process runs; a library from elsewhere, or a damaged
    /// one, can do anything. (Models embedded by `include_model!` need no `unsafe` of
    /// yours: the generated code vouches for the library relax-build compiled, and its
    /// bytes are checked against the sha256 recorded at build time.)
    ///
    /// # Errors
    ///
    /// When the runtime libraries are not found, the file is not a library for this
    /// machine or is truncated, or the signature or weights do not fit it.
    pub unsafe fn load_file(
        library: &Path,
        signature_json: &str,
        weights: Option<&[u8]>,
        device: Device,
    ) -> Result<Session> {
        let signature = ModelSignature::from_json(&library.display().to_string(), signature_json)?;
        runtime::load(&Hints {
            tvm_version: crate::private::TVM_VERSION,
            cargo_target: crate::private::CARGO_TARGET,
            relative_to_executable: None,
        })?;
        // SAFETY: the caller vouches for the library (this function's contract).
        let library = unsafe { library::load_file(&signature.name, library)? };
        Session::new(library, signature, weights, device)
    }

    fn new(
        library: Arc<library::Library>,
        signature: ModelSignature,
        weight_bytes: Option<&[u8]>,
        device: Device,
    ) -> Result<Session> {
        let weights = weights::load(&signature, weight_bytes)?;
        let signature_name = signature.name.clone();
        let model = Arc::new(Model {
            library,
            signature,
            weights,
            device,
            profiler: profile::enabled()
                .then(|| Arc::new(profile::Profiler::new(&signature_name, profile::mode()))),
        });
        // One VM now, so that a model that cannot run fails at load time.
        let first = Instance::create(&model)?;
        Ok(Session {
            model,
            idle: Mutex::new(vec![first]),
        })
    }

    /// The compiled signature (for tools; the generated module documents it).
    #[doc(hidden)]
    pub fn signature(&self) -> &ModelSignature {
        &self.model.signature
    }

    /// The model's name.
    pub fn name(&self) -> &str {
        &self.model.signature.name
    }

    /// The device the model runs on.
    pub fn device(&self) -> Device {
        self.model.device
    }

    /// The names of the model's functions.
    pub fn function_names(&self) -> impl Iterator<Item = &str> {
        self.model
            .signature
            .functions
            .iter()
            .map(|function| function.name.as_str())
    }

    /// Where the model's calls spent their time so far (every thread's, and those of
    /// its [`VirtualMachine`]s), or `None` when profiling is off: set `RELAX_PROFILE=1`
    /// before the first model loads. The same table goes to stderr when the model is
    /// dropped. See the crate docs' "Profiling" section.
    pub fn profile(&self) -> Option<Profile> {
        self.model.profile()
    }

    /// Forgets the profile so far (to leave warm-up calls out); nothing when
    /// profiling is off.
    pub fn reset_profile(&self) {
        if let Some(profiler) = &self.model.profiler {
            profiler.reset();
        }
    }

    /// A VM of the model for this thread's exclusive use (no pool involved).
    ///
    /// # Errors
    ///
    /// When TVM fails to make the VM.
    pub fn virtual_machine(&self) -> Result<VirtualMachine> {
        VirtualMachine::new(Arc::clone(&self.model))
    }

    /// Calls the function named `name` with `inputs` (weights are bound already).
    ///
    /// # Errors
    ///
    /// When the model has no such function, an input's count, dtype or shape does not
    /// match (checked before the call reaches TVM), or TVM raises an error.
    pub fn call(&self, name: &str, inputs: &[&Tensor]) -> Result<Output> {
        let index = self.model.signature.function_index(name)?;
        self.call_by_index(index, inputs)
    }

    /// Calls function `index` of the signature (the generated methods' fast path).
    #[doc(hidden)]
    pub fn call_by_index(&self, index: usize, inputs: &[&Tensor]) -> Result<Output> {
        let instance = self.take_instance()?;
        let result = instance.call(&self.model, index, inputs);
        // A VM whose call failed inside TVM may hold half-made state: it is dropped.
        if !matches!(&result, Err(crate::Error::Tvm { .. })) {
            self.idle
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(instance);
        }
        result
    }

    /// Calls function `index`, which returns one tensor.
    #[doc(hidden)]
    pub fn call_single_by_index(&self, index: usize, inputs: &[&Tensor]) -> Result<Tensor> {
        let name = &self.model.signature.functions[index].name;
        self.call_by_index(index, inputs)?.single(self.name(), name)
    }

    /// Calls function `index`, which returns a tuple of `N` tensors.
    #[doc(hidden)]
    pub fn call_tuple_by_index<const N: usize>(
        &self,
        index: usize,
        inputs: &[&Tensor],
    ) -> Result<[Tensor; N]> {
        let name = &self.model.signature.functions[index].name;
        self.call_by_index(index, inputs)?.tuple(self.name(), name)
    }

    /// A stream of calls of function `name` that carry state: for each `(input, output)`
    /// of `state`, the output of one call is that input of the next (zeros before the
    /// first). `output` is the output's name (ONNX models name theirs) or its position
    /// (`"1"`). The generated `Model::stream()` makes one for the `state` its manifest
    /// entry declares.
    ///
    /// ```no_run
    /// # fn vad(session: &relax_runtime::Session, chunk: &relax_runtime::Tensor, rate: &relax_runtime::Tensor) -> relax_runtime::Result<()> {
    /// let mut stream = session.stream("main", &[("state", "stateN")])?;
    /// let probability = &stream.push(&[chunk, rate])?[0];
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// When the model has no such function, input or output, or an output cannot be
    /// its input (another dtype or rank, or other static dims).
    pub fn stream(&self, name: &str, state: &[(&str, &str)]) -> Result<Stream> {
        let index = self.model.signature.function_index(name)?;
        let function = &self.model.signature.functions[index];
        let refuse = |message: String| Error::Stream {
            model: self.name().to_string(),
            function: name.to_string(),
            message,
        };
        let mut positions = Vec::new();
        for (input, output) in state {
            let input_position = function
                .inputs
                .iter()
                .position(|argument| argument.name == *input)
                .ok_or_else(|| {
                    let names: Vec<&str> = function
                        .inputs
                        .iter()
                        .map(|input| input.name.as_str())
                        .collect();
                    refuse(format!(
                        "it has no input `{input}`; its inputs are: {}",
                        names.join(", ")
                    ))
                })?;
            let output_position = function
                .outputs
                .iter()
                .position(|result| !result.name.is_empty() && result.name == *output)
                .or_else(|| output.parse::<usize>().ok())
                .ok_or_else(|| {
                    let names: Vec<String> = function
                        .outputs
                        .iter()
                        .enumerate()
                        .map(|(position, result)| match result.name.as_str() {
                            "" => position.to_string(),
                            named => format!("{named} ({position})"),
                        })
                        .collect();
                    refuse(format!(
                        "it has no output `{output}`; its outputs are, by name where they have one and position: {}",
                        names.join(", ")
                    ))
                })?;
            positions.push((input_position, output_position));
        }
        self.stream_by_index(index, &positions)
    }

    /// [`Session::stream`] by positions: function `index`, `(input, output)` pairs (what
    /// the generated code calls).
    #[doc(hidden)]
    pub fn stream_by_index(&self, index: usize, state: &[(usize, usize)]) -> Result<Stream> {
        Stream::new(Arc::clone(&self.model), index, state)
    }

    fn take_instance(&self) -> Result<Instance> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop();
        match idle {
            Some(instance) => Ok(instance),
            None => Instance::create(&self.model),
        }
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("model", &self.name())
            .field("device", &self.device())
            .finish_non_exhaustive()
    }
}
