//! Compiling, tuning or inspecting one model with the driver, and turning the driver's
//! failures into errors on the right manifest key.

use std::path::{Path, PathBuf};

use crate::artifacts::{LIBRARY, SIGNATURE, WEIGHTS};
use crate::cargo::Cargo;
use crate::driver::{
    self, Action, ArgumentSpec, Failure, FailureKind, MethodSpec, Outcome, Request, RpcDevice,
};
use crate::elf;
use crate::error::{io, Error, Result};
use crate::files;
use crate::metadata::{Model, SourceKind, Weights};
use crate::signature::{format_shape, Dim, Signature};
use crate::target::{Bf16Hardware, CrossCompiler};
use crate::tensor_spec::SpecDim;
use crate::text::preview;
use crate::toolchain::Toolchain;
use crate::versions::{DRIVER_PROTOCOL, TVM_VERSION};

/// What to compile for: the Cargo target, its TVM target dict, and for a cross build
/// the compiler that links the library.
pub struct CompileTarget<'a> {
    pub cargo: &'a str,
    pub tvm: serde_json::Value,
    pub cross_compiler: Option<&'a CrossCompiler>,
    /// A folder of meta-schedule records to apply (see [`crate::tuning`]).
    pub tuning_records: Option<PathBuf>,
    /// The target CPU's bf16 hardware: known for a build for this machine only (see
    /// [`crate::resolve::Resolver::bf16_hardware`]).
    pub bf16_hardware: Bf16Hardware,
}

/// One run of the driver for one model.
pub struct Job<'a> {
    pub model: &'a Model,
    pub toolchain: &'a Toolchain,
    pub target: &'a CompileTarget<'a>,
    /// The installed driver's entry point.
    pub driver: &'a Path,
    /// The local path of the model's weights file (a fetched file already fetched).
    pub weights_file: Option<&'a Path>,
    pub cargo: Cargo,
}

impl Job<'_> {
    fn request(&self, action: Action, output_dir: &Path) -> Request {
        let model = self.model;
        Request {
            protocol: DRIVER_PROTOCOL,
            tvm_version: TVM_VERSION.to_string(),
            allow_other_tvm_version: self.toolchain.allow_other_version,
            action,
            model: model.name.clone(),
            source: model.source.clone(),
            source_kind: match model.kind {
                SourceKind::Python => "python",
                SourceKind::Onnx => "onnx",
                SourceKind::TorchProgram => "torch_program",
            },
            weights_file: self.weights_file.map(Path::to_path_buf),
            entry: model.entry.clone(),
            inputs: method_specs(model),
            target: self.target.tvm.clone(),
            cross_compiler: self
                .target
                .cross_compiler
                .map(|compiler| compiler.command.clone()),
            tuning_records: self.target.tuning_records.clone(),
            pipeline: model.options.pipeline.as_str(),
            tir_pipeline: model.options.tir_pipeline.clone(),
            opt_level: model.options.opt_level,
            offload: model.options.offload,
            onnx_prepare: model.options.onnx_prepare,
            precision: model.options.precision.as_str(),
            matrix_units: self.target.bf16_hardware.tiles,
            fast_bf16: self.target.bf16_hardware.faster_than_float32,
            weights_mode: match model.weights {
                Weights::Embed => "embed",
                Weights::External => "external",
                _ => "auto",
            },
            output_dir: output_dir.to_path_buf(),
            library_name: LIBRARY,
            signature_name: SIGNATURE,
            weights_name: WEIGHTS,
        }
    }

    fn run(&self, action: Action, output_dir: &Path, inherit_output: bool) -> Result<()> {
        let request = self.request(action, output_dir);
        match driver::run(
            self.toolchain.command(),
            self.driver,
            &request,
            inherit_output,
        )? {
            Outcome::Success => Ok(()),
            Outcome::Failed(failure) => Err(describe_failure(self.model, self.target, failure)),
            Outcome::Crashed { status, stderr } => Err(Error::Model {
                model: self.model.name.clone(),
                key: None,
                message: format!("the compile driver crashed ({status})"),
                detail: stderr,
            }),
        }
    }

    /// Compiles the model into `dir`, leaving there the library, the signature and the
    /// checked weights. The library's ELF machine is checked against the Cargo target.
    pub fn compile(&self, dir: &Path) -> Result<()> {
        self.run(Action::Compile, dir, false)?;
        let library = dir.join(LIBRARY);
        if !library.is_file() || !dir.join(SIGNATURE).is_file() {
            return Err(Error::Model {
                model: self.model.name.clone(),
                key: Some(self.model.key("source")),
                message:
                    "the compile driver exited successfully but wrote no library; does the model \
                          source end the process itself (os._exit, or a child process exiting)?"
                        .to_string(),
                detail: String::new(),
            });
        }
        check_machine(self.model, self.target, &library)?;
        let signature = Signature::read(&self.model.name, &dir.join(SIGNATURE))?;
        for warning in &signature.warnings {
            self.cargo.warning(&format!(
                "relax-build: model `{}`: {warning}",
                self.model.name
            ));
        }
        copy_weights(self, &signature, dir)
    }

    /// Tunes the model with meta-schedule (`trials` per task), recording into
    /// `records_dir`; the driver's progress goes straight to this process's output.
    pub fn tune(&self, records_dir: &Path, trials: u32, rpc: Option<&RpcDevice>) -> Result<()> {
        std::fs::create_dir_all(records_dir)
            .map_err(io(format!("creating {}", records_dir.display())))?;
        let scratch = tempfile::Builder::new()
            .prefix(".relax-tune-")
            .tempdir()
            .map_err(io("creating a scratch folder for tuning"))?;
        let action = Action::Tune {
            trials,
            work_dir: records_dir.to_path_buf(),
            rpc: rpc.cloned(),
        };
        self.run(action, scratch.path(), true)
    }

    /// Imports the model and returns its functions without compiling it.
    pub fn inspect(&self) -> Result<Vec<crate::signature::Function>> {
        let scratch = tempfile::Builder::new()
            .prefix(".relax-inspect-")
            .tempdir()
            .map_err(io("creating a scratch folder for inspecting a model"))?;
        self.run(Action::Inspect, scratch.path(), false)?;
        let path = scratch.path().join(driver::INSPECTION_FILE);
        #[derive(serde::Deserialize)]
        struct Inspection {
            functions: Vec<crate::signature::Function>,
        }
        let bytes = std::fs::read(&path).map_err(io(format!("reading {}", path.display())))?;
        let inspection: Inspection =
            serde_json::from_slice(&bytes).map_err(|error| Error::Model {
                model: self.model.name.clone(),
                key: None,
                message: format!("the driver's inspection is not valid ({error})"),
                detail: String::new(),
            })?;
        Ok(inspection.functions)
    }
}

/// The manifest's input specs, as the driver takes them.
fn method_specs(model: &Model) -> Vec<MethodSpec> {
    model
        .inputs
        .iter()
        .map(|method| MethodSpec {
            method: method.method.clone(),
            arguments: method
                .arguments
                .iter()
                .map(|(name, spec)| ArgumentSpec {
                    name: name.clone(),
                    dtype: spec.dtype.clone(),
                    shape: spec
                        .shape
                        .iter()
                        .map(|dim| match dim {
                            SpecDim::Static(size) => serde_json::json!(size),
                            SpecDim::Symbolic(name) => serde_json::json!(name),
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect()
}

/// Refuses a library built for another machine than the Cargo target's.
fn check_machine(model: &Model, target: &CompileTarget<'_>, library: &Path) -> Result<()> {
    let Some((expected, expected_name)) = elf::target_machine(target.cargo) else {
        return Ok(());
    };
    let mut header = [0u8; 20];
    let read = std::fs::File::open(library)
        .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut header));
    let found = read.ok().and_then(|()| elf::machine_of(&header));
    if found == Some(expected) {
        return Ok(());
    }
    let found = found.map_or("not an ELF library".to_string(), |machine| {
        format!("{} code", elf::machine_name(machine))
    });
    let linker = match target.cross_compiler {
        Some(compiler) => format!("`{}` (from {})", compiler.command, compiler.origin),
        None => "the host's C++ compiler".to_string(),
    };
    Err(Error::Model {
        model: model.name.clone(),
        key: None,
        message: format!(
            "the compiled library is {found}, but the Cargo target {} needs {expected_name} code; \
             it was linked by {linker} for the TVM target {}",
            target.cargo, target.tvm
        ),
        detail: format!(
            "Fix: point CXX_{} at the target's C++ compiler (e.g. {}-linux-gnu-g++) and make sure the \
             model's `target` (or RELAX_{}_TARGET) does not set another mtriple.",
            target.cargo.replace('-', "_"),
            target.cargo.split('-').next().unwrap_or_default(),
            model.name.to_ascii_uppercase()
        ),
    })
}

/// Turns the driver's failure report into an error on the right manifest key.
pub fn describe_failure(model: &Model, target: &CompileTarget<'_>, failure: Failure) -> Error {
    let source = model.source.display();
    let Failure {
        kind,
        message,
        detail,
        subject,
        operators,
    } = failure;
    let (key, message, detail) = match kind {
        FailureKind::Source | FailureKind::SourceException => (
            Some(model.key("source")),
            format!("running {source} raised {message}"),
            detail,
        ),
        FailureKind::SourceExit => (Some(model.key("source")), message, detail),
        FailureKind::EntryMissing | FailureKind::EntryConstruct => (
            Some(model.key("entry")),
            format!("{message}; set `entry` to the attribute to compile"),
            detail,
        ),
        FailureKind::EntryType => (
            Some(model.key("entry")),
            format!(
                "`{}` in {source} cannot be compiled: {message}; expected a relax.frontend.nn.Module \
                 subclass, a TVMScript IRModule, or a function returning an IRModule",
                model.entry
            ),
            detail,
        ),
        FailureKind::InputsMissing => (
            Some(model.key("inputs")),
            format!(
                "{message}; add e.g. [{}.forward] with x = \"float32[batch, 64]\"",
                model.key("inputs")
            ),
            detail,
        ),
        FailureKind::InputsMethod => (
            Some(model.key(&format!("inputs.{}", subject.unwrap_or_default()))),
            match model.kind {
                SourceKind::Onnx => format!("{message}; use [{}.main]", model.key("inputs")),
                SourceKind::Python => format!("{message}; name a method of `{}`", model.entry),
                SourceKind::TorchProgram => {
                    format!("{message}; a .pt2 program's inputs are the ones it was exported with: remove `inputs`")
                }
            },
            String::new(),
        ),
        FailureKind::InputsUnused => (
            Some(model.key("inputs")),
            format!("{message}; remove `inputs` (it is only for relax.frontend.nn modules)"),
            detail,
        ),
        FailureKind::Export => (
            Some(model.key("inputs")),
            format!(
                "exporting `{}` with these inputs failed: {message}",
                model.entry
            ),
            detail,
        ),
        FailureKind::NoFunctions => (Some(model.key("entry")), message, detail),
        FailureKind::OnnxInvalid => (
            Some(model.key("source")),
            format!("{message}; export the model again (e.g. torch.onnx.export) or point `source` at the right file"),
            detail,
        ),
        FailureKind::OnnxUnsupported | FailureKind::TorchUnsupported => {
            return Error::UnsupportedOperator {
                model: model.name.clone(),
                key: model.key("source"),
                operators: operators
                    .iter()
                    .map(|operator| operator.op_type.clone())
                    .collect(),
                message: if detail.is_empty() {
                    message
                } else {
                    format!("{message}\n{detail}")
                },
            }
        }
        FailureKind::TorchInvalid => (
            Some(model.key("source")),
            format!("{message}; save the program again with torch.export.save (torch {})", crate::versions::TORCH_VERSION),
            detail,
        ),
        FailureKind::WeightsKeys => (
            Some(model.key("weights")),
            format!("{message}; save the module's state_dict() with safetensors (safetensors.torch.save_file)"),
            detail,
        ),
        FailureKind::OnnxImport => (
            Some(model.key("source")),
            format!("TVM's ONNX importer failed: {message}"),
            detail,
        ),
        FailureKind::OnnxPrepare => (
            Some(model.key("onnx_prepare")),
            format!("{message}; set onnx_prepare = false to import the graph as it is"),
            detail,
        ),
        FailureKind::InputsContradiction if model.needs_torch => (
            Some(model.key("inputs.forward")),
            format!("{message}; name the arguments as `forward` does, in its order"),
            detail,
        ),
        FailureKind::InputsContradiction => (
            Some(model.key("inputs.main")),
            format!("{message}; make the spec agree with the graph (or remove it to use the graph's own)"),
            detail,
        ),
        FailureKind::UnsupportedType if subject.as_deref().is_some_and(|what| what.contains("argument")) => (
            Some(model.key("inputs")),
            format!("{message}; give its shape in `inputs`"),
            detail,
        ),
        FailureKind::UnsupportedType => (None, message, detail),
        FailureKind::Pipeline => (Some(model.key("pipeline")), message, detail),
        FailureKind::TuningRecords => (Some(model.key("tune")), message, detail),
        FailureKind::TuningSymbolic => (Some(model.key("inputs")), message, detail),
        FailureKind::TuningDevice => (None, message, detail),
        FailureKind::Weights => (Some(model.key("weights")), message, detail),
        FailureKind::Link => {
            let (compiler, fix) = match target.cross_compiler {
                Some(compiler) => (
                    format!("`{}` (from {})", compiler.command, compiler.origin),
                    format!(
                        "point CXX_{} at a C++ compiler for {} (on Debian: apt-get install g++-{}-linux-gnu)",
                        target.cargo.replace('-', "_"),
                        target.cargo,
                        target.cargo.split('-').next().unwrap_or_default()
                    ),
                ),
                None => (
                    "the host's C++ compiler".to_string(),
                    "install g++ (or set CXX)".to_string(),
                ),
            };
            (
                None,
                format!(
                    "linking the library for {} with {compiler} failed; Fix: {fix}",
                    target.cargo
                ),
                detail,
            )
        }
        FailureKind::TvmVersion => (
            None,
            format!("{message}; unset RELAX_PYTHON or install the supported version"),
            detail,
        ),
        FailureKind::Protocol | FailureKind::Compile | FailureKind::Internal => {
            (None, message, detail)
        }
    };
    Error::Model {
        model: model.name.clone(),
        key,
        message,
        detail,
    }
}

/// Checks the model's safetensors file against the weights the functions take, and
/// copies it next to the library.
fn copy_weights(job: &Job<'_>, signature: &Signature, dir: &Path) -> Result<()> {
    let model = job.model;
    let wanted = signature.weights();
    let error = |message: String| Error::Model {
        model: model.name.clone(),
        key: Some(model.key("weights")),
        message,
        detail: String::new(),
    };
    if signature.weights_written {
        // ONNX initializers kept external: the driver wrote them in parameter order.
        return match dir.join(WEIGHTS).is_file() {
            true => Ok(()),
            false => Err(error(
                "the driver reported weights but wrote no weights file".to_string(),
            )),
        };
    }
    if model.needs_torch {
        // The driver loaded a torch module's weights file into the module itself
        // (strictly: its keys are checked there), and the parameters were compiled in.
        return Ok(());
    }
    let Some(weights_path) = job.weights_file else {
        if wanted.is_empty() {
            return Ok(());
        }
        return Err(error(format!(
            "missing: `{}` takes {} weight(s) ({}); set weights = \"<file>.safetensors\" holding them by name",
            model.entry,
            wanted.len(),
            preview(wanted.iter().map(|weight| weight.name.as_str()))
        )));
    };
    if wanted.is_empty() {
        return Err(error(format!(
            "{} is given, but `{}` takes no weights; remove the key",
            weights_path.display(),
            model.entry
        )));
    }
    let bytes =
        std::fs::read(weights_path).map_err(io(format!("reading {}", weights_path.display())))?;
    let file = safetensors::SafeTensors::deserialize(&bytes).map_err(|cause| {
        error(format!(
            "{} is not a valid safetensors file: {cause}",
            weights_path.display()
        ))
    })?;
    for weight in &wanted {
        let view = file.tensor(&weight.name).map_err(|_| {
            error(format!(
                "{} has no tensor `{}` (it has: {})",
                weights_path.display(),
                weight.name,
                preview(file.names().into_iter().map(String::as_str))
            ))
        })?;
        let found_dtype = safetensors_dtype_name(view.dtype());
        let expected_shape = weight.stored_shape();
        let shape_matches = view.shape().len() == expected_shape.len()
            && expected_shape.iter().zip(view.shape()).all(
                |(dim, &size)| !matches!(dim, Dim::Static(expected) if *expected != size as i64),
            );
        if found_dtype != weight.dtype || !shape_matches {
            return Err(error(format!(
                "tensor `{}` in {} is {found_dtype}{:?}, but the model expects {}{}",
                weight.name,
                weights_path.display(),
                view.shape(),
                weight.dtype,
                format_shape(&expected_shape)
            )));
        }
    }
    let unused: Vec<&str> = file
        .names()
        .into_iter()
        .map(String::as_str)
        .filter(|name| !wanted.iter().any(|weight| weight.name == *name))
        .collect();
    if !unused.is_empty() {
        job.cargo.warning(&format!(
            "relax-build: model `{}`: {} has tensors the model does not use: {}",
            model.name,
            weights_path.display(),
            preview(unused.into_iter())
        ));
    }
    files::place_copy(weights_path, &dir.join(WEIGHTS), false)
}

fn safetensors_dtype_name(dtype: safetensors::Dtype) -> String {
    use safetensors::Dtype;
    match dtype {
        Dtype::BOOL => "bool",
        Dtype::U8 => "uint8",
        Dtype::I8 => "int8",
        Dtype::I16 => "int16",
        Dtype::U16 => "uint16",
        Dtype::F16 => "float16",
        Dtype::BF16 => "bfloat16",
        Dtype::I32 => "int32",
        Dtype::U32 => "uint32",
        Dtype::F32 => "float32",
        Dtype::F64 => "float64",
        Dtype::I64 => "int64",
        Dtype::U64 => "uint64",
        other => return format!("{other:?}"),
    }
    .to_string()
}

#[cfg(test)]
mod tests;
