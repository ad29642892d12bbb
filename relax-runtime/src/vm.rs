//! The Relax VirtualMachine: one VM over a loaded library, its functions, and calls.
//!
//! A VM keeps per-call state (registers, frames), so one VM runs one call at a time:
//! [`VirtualMachine`] is `Send` but not `Sync`, and a [`Function`] borrows its VM, so
//! it cannot leave the VM's thread. [`Session`](crate::Session) keeps a pool of VMs
//! to serve concurrent calls.

use std::sync::Arc;

use crate::device::{Device, DeviceKind};
use crate::error::{Error, Result};
use crate::library::Library;
use crate::object::{self, argument, Callee, Object, Value};
use crate::profile::{Profile, Profiler};
use crate::signature::{FunctionSignature, ModelSignature};
use crate::sys;
use crate::tensor::Tensor;

/// TVM's pooled memory allocator (`relax.VirtualMachine`'s default). It reuses freed
/// blocks across calls; measured against the naive allocator (1) on relax-bench's MLP
/// from 1 and 2 threads, and MiniLM, no difference beyond noise.
const POOLED_ALLOCATOR: i64 = 2;

/// Arguments passed from the stack; calls with more use a heap buffer.
const INLINE_ARGUMENTS: usize = 16;

/// What every VM of one loaded model shares: the library, the signature, the weights
/// bound to each function, and the device.
pub(crate) struct Model {
    pub(crate) library: Arc<Library>,
    pub(crate) signature: ModelSignature,
    /// Per function (by signature index), its weights in argument order.
    pub(crate) weights: Vec<Vec<Tensor>>,
    pub(crate) device: Device,
    /// Set when `RELAX_PROFILE` turned profiling on.
    pub(crate) profiler: Option<Arc<Profiler>>,
}

impl Model {
    /// The profile so far, when profiling is on.
    pub(crate) fn profile(&self) -> Option<Profile> {
        self.profiler.as_ref().map(|profiler| profiler.report())
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        if let Some(profile) = self.profile().filter(|profile| profile.calls > 0) {
            eprint!("{profile}");
        }
    }
}

/// One VM, initialized for the model's device, with its functions looked up.
pub(crate) struct Instance {
    /// The VM (its functions hold it too; kept for clarity of ownership).
    _module: Object,
    /// Per function (by signature index).
    functions: Vec<Object>,
}

// SAFETY: a VM has no affinity to the thread that made it; an `Instance` is owned by
// one thread at a time (it is not `Sync`), so its VM runs one call at a time.
unsafe impl Send for Instance {}

impl Instance {
    pub(crate) fn create(model: &Model) -> Result<Instance> {
        let name = &model.signature.name;
        let module = model.library.create_vm(name)?;
        let initialization =
            object::module_function(&module, "vm_initialization")?.ok_or_else(|| {
                Error::LibraryLoad {
                    path: model.library.origin.clone().into(),
                    message: "its VM has no `vm_initialization`".to_string(),
                }
            })?;
        let device = model.device;
        let dlpack = device.to_dlpack();
        let mut arguments = vec![
            argument::int(i64::from(dlpack.device_type)),
            argument::int(i64::from(dlpack.device_id)),
            argument::int(POOLED_ALLOCATOR),
        ];
        if device.kind != DeviceKind::Cpu {
            // The VM needs the host CPU last, for shape computations.
            let cpu = Device::cpu().to_dlpack();
            arguments.extend([
                argument::int(i64::from(cpu.device_type)),
                argument::int(i64::from(cpu.device_id)),
                argument::int(POOLED_ALLOCATOR),
            ]);
        }
        object::call(Callee::Object(&initialization), &mut arguments, || {
            format!("initializing a VM of model `{name}` on {device:?}")
        })?;
        if let Some(profiler) = &model.profiler {
            profiler.attach(&module, name)?;
        }
        let functions = model
            .signature
            .functions
            .iter()
            .map(|function| {
                object::module_function(&module, &function.name)?.ok_or_else(|| {
                    Error::FunctionNotFound {
                        model: name.clone(),
                        function: function.name.clone(),
                        available: format!(
                            "(the signature declares it, but {} does not define it: is it the library of another model?)",
                            model.library.origin
                        ),
                    }
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Instance {
            _module: module,
            functions,
        })
    }

    /// Calls function `index` after checking `inputs` against its signature.
    ///
    /// Up to 16 arguments (inputs and weights) are passed from the stack; tensors made
    /// in Rust are wrapped for TVM on their first call only.
    pub(crate) fn call(&self, model: &Model, index: usize, inputs: &[&Tensor]) -> Result<Output> {
        match &model.profiler {
            None => self.call_unprofiled(model, index, inputs),
            Some(profiler) => profiler.time_call(&model.signature.functions[index].name, || {
                self.call_unprofiled(model, index, inputs)
            }),
        }
    }

    fn call_unprofiled(&self, model: &Model, index: usize, inputs: &[&Tensor]) -> Result<Output> {
        let signature = &model.signature.functions[index];
        signature.check_inputs(&model.signature.name, inputs)?;
        let weights = &model.weights[index];
        let count = inputs.len() + weights.len();
        let mut inline = [argument::none(); INLINE_ARGUMENTS];
        let mut spilled = Vec::new();
        let arguments = if count <= INLINE_ARGUMENTS {
            &mut inline[..count]
        } else {
            spilled.resize(count, argument::none());
            &mut spilled[..]
        };
        for (slot, tensor) in arguments
            .iter_mut()
            .zip(inputs.iter().copied().chain(weights))
        {
            *slot = tensor.tvm_object()?.as_argument();
        }
        let value = object::call(Callee::Object(&self.functions[index]), arguments, || {
            format!(
                "calling `{}` of model `{}`",
                signature.name, model.signature.name
            )
        })?;
        to_output(model, signature, value)
    }
}

fn to_output(model: &Model, signature: &FunctionSignature, value: Value) -> Result<Output> {
    let unexpected = |found: String| Error::UnexpectedOutput {
        model: model.signature.name.clone(),
        function: signature.name.clone(),
        expected: "a tensor or a tuple".to_string(),
        found,
    };
    match value {
        Value::Object(object) if object.type_index() == sys::TVMFFITypeIndex_kTVMFFITensor => {
            Ok(Output::Tensor(Tensor::from_tvm(object)?))
        }
        Value::Object(object) if object.type_index() == sys::TVMFFITypeIndex_kTVMFFIArray => {
            let items = object::array_items(&object)?;
            Ok(Output::Tuple(
                items
                    .into_iter()
                    .map(|item| to_output(model, signature, item))
                    .collect::<Result<_>>()?,
            ))
        }
        other => Err(unexpected(other.describe())),
    }
}

/// What a function returned: a tensor, or a tuple of outputs.
#[derive(Debug, Clone)]
pub enum Output {
    /// A single tensor.
    Tensor(Tensor),
    /// A tuple (possibly nested).
    Tuple(Vec<Output>),
}

impl Output {
    /// The tensor, when the output is one.
    pub fn into_tensor(self) -> Option<Tensor> {
        match self {
            Output::Tensor(tensor) => Some(tensor),
            Output::Tuple(_) => None,
        }
    }

    pub(crate) fn single(self, model: &str, function: &str) -> Result<Tensor> {
        match self {
            Output::Tensor(tensor) => Ok(tensor),
            Output::Tuple(items) => Err(Error::UnexpectedOutput {
                model: model.to_string(),
                function: function.to_string(),
                expected: "a tensor".to_string(),
                found: format!("a tuple of {}", items.len()),
            }),
        }
    }

    pub(crate) fn tuple<const N: usize>(self, model: &str, function: &str) -> Result<[Tensor; N]> {
        let unexpected = |found: String| Error::UnexpectedOutput {
            model: model.to_string(),
            function: function.to_string(),
            expected: format!("a tuple of {N} tensors"),
            found,
        };
        let items = match self {
            Output::Tuple(items) => items,
            Output::Tensor(_) => return Err(unexpected("a tensor".to_string())),
        };
        let count = items.len();
        let tensors: Vec<Tensor> = items
            .into_iter()
            .map(|item| {
                item.into_tensor()
                    .ok_or_else(|| unexpected("a nested tuple".to_string()))
            })
            .collect::<Result<_>>()?;
        tensors
            .try_into()
            .map_err(|_| unexpected(format!("a tuple of {count}")))
    }
}

/// One Relax VM of a loaded model, for calls from one thread at a time.
///
/// `Send` (move it to the thread that uses it) but not `Sync`: a VM runs one call at a
/// time. To call a model from several threads, share a [`Session`](crate::Session)
/// (or the generated `Model`), which keeps a VM per concurrent call.
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<relax_runtime::VirtualMachine>();
/// ```
pub struct VirtualMachine {
    model: Arc<Model>,
    instance: Instance,
}

impl VirtualMachine {
    pub(crate) fn new(model: Arc<Model>) -> Result<VirtualMachine> {
        let instance = Instance::create(&model)?;
        Ok(VirtualMachine { model, instance })
    }

    /// The device the VM runs on.
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

    /// A function of the model, by its Relax name.
    ///
    /// # Errors
    ///
    /// When the model has no function of that name (the message lists those it has).
    pub fn function(&self, name: &str) -> Result<Function<'_>> {
        let index = self.model.signature.function_index(name)?;
        Ok(Function { vm: self, index })
    }

    /// Calls the function named `name` with `inputs` (weights are bound already).
    ///
    /// # Errors
    ///
    /// See [`Function::call`].
    pub fn call(&self, name: &str, inputs: &[&Tensor]) -> Result<Output> {
        self.function(name)?.call(inputs)
    }
}

/// A function of a [`VirtualMachine`], ready to call.
///
/// It borrows its VM, so it stays on the VM's thread:
///
/// ```compile_fail
/// fn send<T: Send>() {}
/// send::<relax_runtime::Function<'static>>();
/// ```
pub struct Function<'vm> {
    vm: &'vm VirtualMachine,
    index: usize,
}

impl Function<'_> {
    fn signature(&self) -> &FunctionSignature {
        &self.vm.model.signature.functions[self.index]
    }

    /// The function's Relax name.
    pub fn name(&self) -> &str {
        &self.signature().name
    }

    /// The number of inputs the caller passes (weights are bound already).
    pub fn input_count(&self) -> usize {
        self.signature().inputs.len()
    }

    /// Calls the function after checking `inputs` against its signature.
    ///
    /// # Errors
    ///
    /// When an input's count, dtype or shape does not match (checked before the call
    /// reaches TVM), or TVM raises an error.
    pub fn call(&self, inputs: &[&Tensor]) -> Result<Output> {
        self.vm.instance.call(&self.vm.model, self.index, inputs)
    }

    /// Calls a function that returns one tensor.
    ///
    /// # Errors
    ///
    /// As [`Function::call`], and when the function returns a tuple.
    pub fn call_single(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        self.call(inputs)?
            .single(&self.vm.model.signature.name, self.name())
    }

    /// Calls a function that returns a tuple of `N` tensors.
    ///
    /// # Errors
    ///
    /// As [`Function::call`], and when the function returns something else.
    pub fn call_tuple<const N: usize>(&self, inputs: &[&Tensor]) -> Result<[Tensor; N]> {
        self.call(inputs)?
            .tuple(&self.vm.model.signature.name, self.name())
    }
}
