//! Compiling one model: run the driver, check its weights, collect the artifacts.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_json::json;

use crate::cache::{LIBRARY, SIGNATURE, WEIGHTS};
use crate::error::{io, Error, Result};
use crate::metadata::{Model, SpecDim, Weights};
use crate::signature::{format_shape, Dim, Signature};
use crate::target::CrossCompiler;
use crate::toolchain::Toolchain;

/// The compile driver, shipped inside the crate.
pub const DRIVER_SOURCE: &str = include_str!("driver.py");

/// The driver's report of a failure.
#[derive(Debug, Deserialize)]
struct DriverError {
    kind: String,
    message: String,
    #[serde(default)]
    detail: String,
}

/// What to compile for: the Cargo target, its TVM target dict, and for a cross build
/// the compiler that links the library.
pub struct CompileTarget<'a> {
    pub cargo: &'a str,
    pub tvm: serde_json::Value,
    pub cross_compiler: Option<&'a CrossCompiler>,
    /// A folder of meta-schedule records to apply (see [`crate::tuning`]).
    pub tuning_records: Option<PathBuf>,
}

/// Compiles `model` for `target` into `model_dir` with the toolchain's Python, leaving
/// there the library, the signature and the checked weights (see [`crate::cache`] for
/// the file names). The library's ELF machine is checked against the Cargo target.
pub fn compile(
    model: &Model,
    toolchain: &Toolchain,
    target: &CompileTarget<'_>,
    driver: &Path,
    model_dir: &Path,
) -> Result<()> {
    std::fs::create_dir_all(model_dir).map_err(io(format!("creating {}", model_dir.display())))?;
    let request_path = write_request(model, target, model_dir, None)?;

    let output = Command::new(&toolchain.python)
        .arg(driver)
        .arg(&request_path)
        .output()
        .map_err(|error| Error::Toolchain {
            message: format!("cannot run {}: {error}", toolchain.python.display()),
        })?;
    if !output.status.success() {
        return Err(driver_failure(model, target, model_dir, &output));
    }
    check_machine(model, target, &model_dir.join(LIBRARY))?;
    let signature = read_signature(&model.name, &model_dir.join(SIGNATURE))?;
    copy_weights(model, &signature, model_dir)?;
    std::fs::remove_file(&request_path)
        .map_err(io(format!("removing {}", request_path.display())))?;
    Ok(())
}

/// Refuses a library built for another machine than the Cargo target's.
fn check_machine(model: &Model, target: &CompileTarget<'_>, library: &Path) -> Result<()> {
    let Some((expected, expected_name)) = crate::target::elf_machine(target.cargo) else {
        return Ok(());
    };
    let bytes = std::fs::read(library).map_err(io(format!("reading {}", library.display())))?;
    let found = crate::target::read_elf_machine(&bytes);
    if found == Some(expected) {
        return Ok(());
    }
    let found = found.map_or("not an ELF library".to_string(), |machine| {
        format!("{} code", crate::target::elf_machine_name(machine))
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

/// Reads a signature JSON written by the driver.
pub fn read_signature(model: &str, path: &Path) -> Result<Signature> {
    let bytes = std::fs::read(path).map_err(io(format!("reading {}", path.display())))?;
    serde_json::from_slice(&bytes).map_err(|error| Error::Model {
        model: model.to_string(),
        key: None,
        message: format!("{} is not a valid signature ({error})", path.display()),
        detail: String::new(),
    })
}

/// Tunes `model` with meta-schedule (`trials` per task), writing the records into
/// `records_dir`; the driver's progress goes straight to this process's stdout/stderr.
pub fn tune(
    model: &Model,
    toolchain: &Toolchain,
    target: &CompileTarget<'_>,
    driver: &Path,
    records_dir: &Path,
    trials: u32,
) -> Result<()> {
    std::fs::create_dir_all(records_dir)
        .map_err(io(format!("creating {}", records_dir.display())))?;
    let scratch = tempfile_dir(records_dir)?;
    let tune = json!({"trials": trials, "work_dir": records_dir});
    let request_path = write_request(model, target, &scratch, Some(tune))?;
    let status = Command::new(&toolchain.python)
        .arg(driver)
        .arg(&request_path)
        .status()
        .map_err(|error| Error::Toolchain {
            message: format!("cannot run {}: {error}", toolchain.python.display()),
        })?;
    let result = match status.success() {
        true => Ok(()),
        false => {
            let output = std::process::Output {
                status,
                stdout: Vec::new(),
                stderr: Vec::new(),
            };
            Err(driver_failure(model, target, &scratch, &output))
        }
    };
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn tempfile_dir(near: &Path) -> Result<PathBuf> {
    let dir = near.join(format!(".scratch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    Ok(dir)
}

/// Writes the driver's request for `model` into `dir/request.json` (with `tune`, a
/// tuning run instead of a compile) and returns its path.
fn write_request(
    model: &Model,
    target: &CompileTarget<'_>,
    dir: &Path,
    tune: Option<serde_json::Value>,
) -> Result<PathBuf> {
    let request = json!({
        "model": model.name,
        "source": model.source,
        "entry": model.entry,
        "inputs": inputs_json(model),
        "target": target.tvm,
        "cross_compiler": target.cross_compiler.map(|compiler| &compiler.command),
        "tuning_records": target.tuning_records,
        "pipeline": model.options.pipeline.as_str(),
        "tir_pipeline": model.options.tir_pipeline,
        "opt_level": model.options.opt_level,
        "weights_mode": match model.weights {
            Weights::Embed => "embed",
            Weights::External => "external",
            _ => "auto",
        },
        "weights_name": WEIGHTS,
        "output_dir": dir,
        "library_name": LIBRARY,
        "tune": tune,
    });
    let path = dir.join("request.json");
    write_atomically(&path, request.to_string().as_bytes())?;
    Ok(path)
}

/// The inputs as an ordered list the driver turns into an nn export spec.
fn inputs_json(model: &Model) -> serde_json::Value {
    if model.inputs.is_empty() {
        return serde_json::Value::Null;
    }
    let methods: serde_json::Map<String, serde_json::Value> = model
        .inputs
        .iter()
        .map(|method| {
            let arguments: Vec<serde_json::Value> = method
                .arguments
                .iter()
                .map(|(name, spec)| {
                    let shape: Vec<serde_json::Value> = spec
                        .shape
                        .iter()
                        .map(|dim| match dim {
                            SpecDim::Static(size) => json!(size),
                            SpecDim::Symbolic(name) => json!(name),
                        })
                        .collect();
                    json!({"name": name, "dtype": spec.dtype, "shape": shape})
                })
                .collect();
            (method.method.clone(), json!(arguments))
        })
        .collect();
    serde_json::Value::Object(methods)
}

/// Turns the driver's `error.json` (or its stderr, if it crashed) into an error on the right key.
fn driver_failure(
    model: &Model,
    target: &CompileTarget<'_>,
    model_dir: &Path,
    output: &std::process::Output,
) -> Error {
    let report = std::fs::read(model_dir.join("error.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<DriverError>(&bytes).ok());
    let Some(report) = report else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Error::Model {
            model: model.name.clone(),
            key: None,
            message: format!("the compile driver crashed ({})", output.status),
            detail: stderr
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n"),
        };
    };
    let source = model.source.display();
    let (key, message) = match report.kind.as_str() {
        "source" | "source_exception" => (
            Some(model.key("source")),
            format!("running {source} raised {}", report.message),
        ),
        "entry_missing" | "entry_type" | "entry_construct" => {
            let expected = "expected a relax.frontend.nn.Module subclass, a TVMScript IRModule, \
                            or a function returning an IRModule";
            let message = match report.kind.as_str() {
                "entry_type" => format!(
                    "`{}` in {source} cannot be compiled: {}; {expected}",
                    model.entry, report.message
                ),
                _ => format!(
                    "{}; set `entry` to the attribute to compile",
                    report.message
                ),
            };
            (Some(model.key("entry")), message)
        }
        "inputs_missing" => (
            Some(model.key("inputs")),
            format!(
                "{}; add e.g. [{}.forward] with x = \"float32[batch, 64]\"",
                report.message,
                model.key("inputs")
            ),
        ),
        "inputs_method" => (
            Some(model.key(&format!("inputs.{}", report.detail))),
            format!("{}; name a method of `{}`", report.message, model.entry),
        ),
        "inputs_unused" => (
            Some(model.key("inputs")),
            format!(
                "{}; remove `inputs` (it is only for relax.frontend.nn modules)",
                report.message
            ),
        ),
        "export" => (
            Some(model.key("inputs")),
            format!(
                "exporting `{}` with these inputs failed: {}",
                model.entry, report.message
            ),
        ),
        "onnx_invalid" => (
            Some(model.key("source")),
            format!("{}; export the model again (e.g. torch.onnx.export) or point `source` at the right file", report.message),
        ),
        "unsupported_op" => {
            return Error::UnsupportedOperator {
                model: model.name.clone(),
                key: model.key("source"),
                operator: report.detail,
                message: format!(
                    "{}; export the model with other operators or another opset, or check TVM's ONNX frontend for support",
                    report.message
                ),
            }
        }
        "onnx_import" => (Some(model.key("source")), format!("TVM's ONNX importer failed: {}", report.message)),
        "inputs_contradiction" => (
            Some(model.key("inputs.main")),
            format!("{}; make the spec agree with the graph (or remove it to use the graph's own)", report.message),
        ),
        "unsupported_type" if report.message.contains("argument") => (
            Some(model.key("inputs")),
            format!("{}; give its shape in `inputs`", report.message),
        ),
        "unsupported_type" => (None, report.message),
        "tuning_records" => (Some(model.key("tune")), report.message),
        "link" => {
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
                None => ("the host's C++ compiler".to_string(), "install g++ (or set CXX)".to_string()),
            };
            return Error::Model {
                model: model.name.clone(),
                key: None,
                message: format!("linking the library for {} with {compiler} failed; Fix: {fix}", target.cargo),
                detail: report.detail,
            };
        }
        "tvm_version" => (
            None,
            format!(
                "{}; unset RELAX_PYTHON or install the supported version",
                report.message
            ),
        ),
        _ => (None, format!("{} failed: {}", report.kind, report.message)),
    };
    let detail = if report.kind == "inputs_method" {
        String::new()
    } else {
        report.detail
    };
    Error::Model {
        model: model.name.clone(),
        key,
        message,
        detail,
    }
}

/// Checks the manifest's safetensors file against the weights the functions take,
/// and copies it next to the library.
fn copy_weights(model: &Model, signature: &Signature, model_dir: &Path) -> Result<()> {
    let mut wanted = Vec::new();
    for function in &signature.functions {
        for weight in &function.weights {
            if !wanted
                .iter()
                .any(|known: &&crate::signature::TensorType| known.name == weight.name)
            {
                wanted.push(weight);
            }
        }
    }
    let error = |message: String| Error::Model {
        model: model.name.clone(),
        key: Some(model.key("weights")),
        message,
        detail: String::new(),
    };
    if signature.weights_written {
        // ONNX initializers kept external: the driver wrote them in parameter order.
        return match model_dir.join(WEIGHTS).is_file() {
            true => Ok(()),
            false => Err(error(
                "the driver reported weights but wrote no weights file".to_string(),
            )),
        };
    }
    let Some(weights_path) = model.weights_file() else {
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
        let shape_matches = view.shape().len() == weight.shape.len()
            && weight.shape.iter().zip(view.shape()).all(
                |(dim, &size)| !matches!(dim, Dim::Static(expected) if *expected != size as i64),
            );
        if found_dtype != weight.dtype || !shape_matches {
            return Err(error(format!(
                "tensor `{}` in {} is {found_dtype}{:?}, but the model expects {}{}",
                weight.name,
                weights_path.display(),
                view.shape(),
                weight.dtype,
                format_shape(&weight.shape)
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
        crate::cargo::warning(&format!(
            "relax-build: model `{}`: {} has tensors the model does not use: {}",
            model.name,
            weights_path.display(),
            preview(unused.into_iter())
        ));
    }
    write_atomically(&model_dir.join(WEIGHTS), &bytes)
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

/// The first few names, then a count of the rest.
fn preview<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    let shown = names.iter().take(6).copied().collect::<Vec<_>>().join(", ");
    match names.len() {
        count if count > 6 => format!("{shown}, and {} more", count - 6),
        _ => shown,
    }
}

/// Writes a file under a temporary name in the same folder, then renames it into place.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let temporary = path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|ext| ext.to_str()).unwrap_or("")
    ));
    std::fs::write(&temporary, bytes).map_err(io(format!("writing {}", temporary.display())))?;
    std::fs::rename(&temporary, path).map_err(io(format!("renaming {} into place", path.display())))
}
