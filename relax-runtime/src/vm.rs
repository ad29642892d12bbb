//! The Relax VirtualMachine: load a compiled model, look up its functions, call them.

use std::collections::HashMap;
use std::path::Path;

use crate::device::{Device, DeviceKind};
use crate::error::{Error, Result};
use crate::library::Runtime;
use crate::object::{self, argument, Object, Value};
use crate::signature::{FunctionSignature, ModelSignature};
use crate::sys;
use crate::tensor::Tensor;
use crate::weights;

/// TVM's pooled memory allocator (`relax.VirtualMachine`'s default).
const POOLED_ALLOCATOR: i64 = 2;

/// Arguments passed from the stack; calls with more use a heap buffer.
const INLINE_ARGUMENTS: usize = 16;

/// A loaded model: its VM, initialized for one device, and its weights.
///
/// A VM runs one call at a time: it is `Send` but not `Sync`; load one per thread
/// to run calls in parallel.
pub struct VirtualMachine {
    signature: &'static ModelSignature,
    module: Object,
    weights: HashMap<&'static str, Tensor>,
    device: Device,
}

// The VM module is only used through `&self` methods of a type that is not Sync.
unsafe impl Send for VirtualMachine {}

impl VirtualMachine {
    /// Loads a model from its library bytes (as embedded by `include_model!`) and
    /// safetensors weights, and initializes its VM on `device`.
    pub fn load(
        signature: &'static ModelSignature,
        library: &[u8],
        weights: Option<&[u8]>,
        device: Device,
    ) -> Result<VirtualMachine> {
        let runtime = Runtime::get_or_load(signature.runtime_library_dirs)?;
        let executable = runtime.load_module_from_bytes(signature.name, library)?;
        VirtualMachine::initialize(runtime, signature, executable, weights, device)
    }

    /// Loads a model from a library file on disk (e.g. `$OUT_DIR/relax/<model>/<model>.so`).
    pub fn load_file(
        signature: &'static ModelSignature,
        library: &Path,
        weights: Option<&[u8]>,
        device: Device,
    ) -> Result<VirtualMachine> {
        let runtime = Runtime::get_or_load(signature.runtime_library_dirs)?;
        let executable = runtime.load_module_from_file(signature.name, library)?;
        VirtualMachine::initialize(runtime, signature, executable, weights, device)
    }

    fn initialize(
        runtime: &Runtime,
        signature: &'static ModelSignature,
        executable: Object,
        weights: Option<&[u8]>,
        device: Device,
    ) -> Result<VirtualMachine> {
        let model = signature.name;
        let weights = weights::load(signature, weights)?;
        let load_executable = runtime
            .module_function(&executable, "vm_load_executable")?
            .ok_or_else(|| Error::LibraryLoad {
                path: format!("<library of model `{model}`>").into(),
                message: "it is not a Relax VM executable (no `vm_load_executable`)".to_string(),
            })?;
        let module = match object::call(&load_executable, &mut [], || {
            format!("creating the VM of model `{model}`")
        })? {
            Value::Object(module) => module,
            other => {
                return Err(Error::UnexpectedOutput {
                    model: model.to_string(),
                    function: "vm_load_executable".to_string(),
                    expected: "a VM module".to_string(),
                    found: other.describe(),
                })
            }
        };
        let initialization = runtime
            .module_function(&module, "vm_initialization")?
            .expect("every Relax VM has vm_initialization");
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
        object::call(&initialization, &mut arguments, || {
            format!("initializing the VM of model `{model}` on {device:?}")
        })?;
        Ok(VirtualMachine {
            signature,
            module,
            weights,
            device,
        })
    }

    /// The model's compiled signature.
    pub fn signature(&self) -> &'static ModelSignature {
        self.signature
    }

    /// The device the VM runs on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Looks up a function of the model, with its weights bound.
    pub fn function(&self, name: &str) -> Result<Function> {
        let model = self.signature.name;
        let not_found = || Error::FunctionNotFound {
            model: model.to_string(),
            function: name.to_string(),
            available: self
                .signature
                .functions
                .iter()
                .map(|function| function.name)
                .collect::<Vec<_>>()
                .join(", "),
        };
        let signature = self
            .signature
            .functions
            .iter()
            .find(|function| function.name == name)
            .ok_or_else(not_found)?;
        let handle = Runtime::loaded()
            .module_function(&self.module, name)?
            .ok_or_else(not_found)?;
        let weights = signature
            .weights
            .iter()
            .map(|weight| self.weights[weight.name].clone())
            .collect();
        Ok(Function {
            model,
            signature,
            handle,
            weights,
            _vm: self.module.clone(),
        })
    }
}

/// A function of a loaded model, ready to call.
pub struct Function {
    model: &'static str,
    signature: &'static FunctionSignature,
    handle: Object,
    weights: Vec<Tensor>,
    /// Keeps the VM alive as long as the function.
    _vm: Object,
}

// Like the VM it belongs to, a function runs one call at a time.
unsafe impl Send for Function {}

/// What a function returned: a tensor, or a tuple of outputs.
#[derive(Debug, Clone)]
pub enum Output {
    Tensor(Tensor),
    Tuple(Vec<Output>),
}

impl Function {
    /// The function's compiled signature.
    pub fn signature(&self) -> &'static FunctionSignature {
        self.signature
    }

    /// Calls the function after checking `inputs` against its signature.
    ///
    /// Up to 16 arguments (inputs and weights) are passed from the stack, so a call
    /// allocates nothing on the Rust side; tensors made in Rust are wrapped for TVM on
    /// their first call only.
    pub fn call(&self, inputs: &[&Tensor]) -> Result<Output> {
        self.signature.check_inputs(self.model, inputs)?;
        let count = inputs.len() + self.weights.len();
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
            .zip(inputs.iter().copied().chain(&self.weights))
        {
            *slot = tensor.tvm_object()?.as_argument();
        }
        let value = object::call(&self.handle, arguments, || {
            format!(
                "calling `{}` of model `{}`",
                self.signature.name, self.model
            )
        })?;
        self.to_output(value)
    }

    /// Calls a function that returns one tensor.
    pub fn call_single(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        match self.call(inputs)? {
            Output::Tensor(tensor) => Ok(tensor),
            Output::Tuple(items) => {
                Err(self.unexpected("a tensor", format!("a tuple of {}", items.len())))
            }
        }
    }

    /// Calls a function that returns a tuple of `N` tensors.
    pub fn call_tuple<const N: usize>(&self, inputs: &[&Tensor]) -> Result<[Tensor; N]> {
        let expected = || format!("a tuple of {N} tensors");
        let items = match self.call(inputs)? {
            Output::Tuple(items) => items,
            Output::Tensor(_) => return Err(self.unexpected(&expected(), "a tensor".to_string())),
        };
        let count = items.len();
        let tensors: Vec<Tensor> = items
            .into_iter()
            .map(|item| match item {
                Output::Tensor(tensor) => Ok(tensor),
                Output::Tuple(_) => Err(self.unexpected(&expected(), "a nested tuple".to_string())),
            })
            .collect::<Result<_>>()?;
        tensors
            .try_into()
            .map_err(|_| self.unexpected(&expected(), format!("a tuple of {count}")))
    }

    fn to_output(&self, value: Value) -> Result<Output> {
        match value {
            Value::Object(object) if object.type_index() == sys::TVMFFITypeIndex_kTVMFFITensor => {
                Ok(Output::Tensor(Tensor::from_tvm(object)))
            }
            Value::Object(object) if object.type_index() == sys::TVMFFITypeIndex_kTVMFFIArray => {
                let items = Runtime::loaded().array_items(&object)?;
                Ok(Output::Tuple(
                    items
                        .into_iter()
                        .map(|item| self.to_output(item))
                        .collect::<Result<_>>()?,
                ))
            }
            other => Err(self.unexpected("a tensor or a tuple", other.describe())),
        }
    }

    fn unexpected(&self, expected: &str, found: String) -> Error {
        Error::UnexpectedOutput {
            model: self.model.to_string(),
            function: self.signature.name.to_string(),
            expected: expected.to_string(),
            found,
        }
    }
}
