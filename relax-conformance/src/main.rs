//! `relax-conformance`: runs ONNX backend-test cases through relax-build's own compile
//! path and relax-runtime, and compares every output with the expected one.
//!
//! ```text
//! relax-conformance [--expect FILE] [--write-expect FILE] DIR [DIR ...]
//! ```
//!
//! Each `DIR/<case>/` holds `model.onnx` and `test_data_set_*/{input,output}_<i>.pb`
//! (the layout of `onnx/backend/test/data/`). One line per case: `PASS <case>`,
//! `FAIL <case>: <reason>` or `UNSUPPORTED <case>: <operator>` (TVM's importer rejects
//! it; counted as failed), then a summary of the unsupported cases and, last,
//! `N passed, M failed`. Outputs match when |actual - expected| <= 1e-5 + 1e-3 * |expected|
//! (integers and booleans exactly). With `--expect FILE` (one passing case name per line),
//! the exit status is 1 only when a listed case does not pass; without it, when any case fails.

mod onnx_tensor;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use relax_build::metadata::Model;
use relax_build::{Config, Error as BuildError};
use relax_runtime::signature::{Dim, FunctionSignature, ModelSignature, TensorSignature};
use relax_runtime::{DType, Device, Output, Tensor, VirtualMachine};

const RELATIVE_TOLERANCE: f64 = 1e-3;
const ABSOLUTE_TOLERANCE: f64 = 1e-5;

enum Outcome {
    Pass,
    Fail(String),
    Unsupported(String),
}

struct Options {
    dirs: Vec<PathBuf>,
    expect: Option<PathBuf>,
    write_expect: Option<PathBuf>,
}

fn parse_arguments() -> Result<Options, String> {
    let mut options = Options {
        dirs: Vec::new(),
        expect: None,
        write_expect: None,
    };
    let mut arguments = std::env::args().skip(1);
    while let Some(argument) = arguments.next() {
        match argument.as_str() {
            "--expect" => {
                options.expect = Some(arguments.next().ok_or("--expect needs a file")?.into())
            }
            "--write-expect" => {
                options.write_expect = Some(
                    arguments
                        .next()
                        .ok_or("--write-expect needs a file")?
                        .into(),
                )
            }
            "-h" | "--help" => {
                return Err(
                    "usage: relax-conformance [--expect FILE] [--write-expect FILE] DIR [DIR ...]"
                        .to_string(),
                )
            }
            _ => options.dirs.push(argument.into()),
        }
    }
    if options.dirs.is_empty() {
        return Err(
            "usage: relax-conformance [--expect FILE] [--write-expect FILE] DIR [DIR ...]"
                .to_string(),
        );
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse_arguments() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let mut cases = Vec::new();
    for dir in &options.dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            eprintln!("error: cannot read the folder {}", dir.display());
            return ExitCode::from(2);
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.join("model.onnx").is_file())
            .collect();
        found.sort();
        cases.extend(found);
    }
    let out_root = tempfile::tempdir().expect("a temporary folder");
    let config = Config::new()
        .cargo_directives(false)
        .target(env!("RELAX_CONFORMANCE_HOST"))
        .host(env!("RELAX_CONFORMANCE_HOST"));
    let runtime_dirs = match runtime_library_dirs(&config) {
        Ok(dirs) => dirs,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };

    let (mut passed, mut failed, mut unsupported) = (Vec::new(), Vec::new(), Vec::new());
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let out_dir = out_root.path().join(&name);
        match run_case(&config.clone().out_dir(&out_dir), case, runtime_dirs) {
            Outcome::Pass => {
                println!("PASS {name}");
                passed.push(name);
            }
            Outcome::Fail(reason) => {
                println!("FAIL {name}: {reason}");
                failed.push((name, reason));
            }
            Outcome::Unsupported(operator) => {
                println!("UNSUPPORTED {name}: {operator}");
                unsupported.push((name, operator));
            }
        }
    }
    if !unsupported.is_empty() {
        let list: Vec<String> = unsupported
            .iter()
            .map(|(name, operator)| format!("{name} ({operator})"))
            .collect();
        println!("unsupported by TVM's ONNX importer: {}", list.join(", "));
    }
    println!(
        "{} passed, {} failed",
        passed.len(),
        failed.len() + unsupported.len()
    );

    if let Some(path) = &options.write_expect {
        let text: String = passed.iter().map(|name| format!("{name}\n")).collect();
        if let Err(error) = std::fs::write(path, text) {
            eprintln!("error: writing {}: {error}", path.display());
            return ExitCode::from(2);
        }
    }
    match &options.expect {
        Some(path) => check_expected(path, &passed),
        None if failed.is_empty() && unsupported.is_empty() => ExitCode::SUCCESS,
        None => ExitCode::FAILURE,
    }
}

/// Exit status 1 when a case listed in `path` did not pass.
fn check_expected(path: &Path, passed: &[String]) -> ExitCode {
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!(
            "error: cannot read the expected pass list {}",
            path.display()
        );
        return ExitCode::from(2);
    };
    let regressions: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter(|name| !passed.iter().any(|passed| passed == name))
        .collect();
    let expected_count = text
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .count();
    let new: Vec<&String> = passed
        .iter()
        .filter(|name| !text.lines().any(|line| line.trim() == name.as_str()))
        .collect();
    if !new.is_empty() {
        println!(
            "newly passing (add them to {}): {}",
            path.display(),
            new.iter()
                .map(|name| name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if regressions.is_empty() {
        println!("all {expected_count} expected cases pass");
        return ExitCode::SUCCESS;
    }
    for name in &regressions {
        println!(
            "REGRESSION {name}: listed in {} but did not pass",
            path.display()
        );
    }
    ExitCode::FAILURE
}

/// The folders of the toolchain's TVM runtime libraries, `:`-separated, for the VM loader.
fn runtime_library_dirs(config: &Config) -> Result<&'static str, String> {
    let cache = config.cache().map_err(|error| error.to_string())?;
    let toolchain = relax_build::toolchain::find_or_provision(None, &cache)
        .map_err(|error| error.to_string())?;
    let dirs: Vec<String> = toolchain
        .runtime_library_dirs
        .iter()
        .map(|dir| dir.to_string_lossy().into_owned())
        .collect();
    Ok(dirs.join(":").leak())
}

fn run_case(config: &Config, case: &Path, runtime_dirs: &'static str) -> Outcome {
    let model = match Model::from_source("model", &case.join("model.onnx"), None) {
        Ok(model) => model,
        Err(error) => return Outcome::Fail(first_line(&error.to_string())),
    };
    let compiled = match config.try_compile_model(&model) {
        Ok(compiled) => compiled,
        Err(BuildError::UnsupportedOperator { operator, .. }) => {
            return Outcome::Unsupported(operator)
        }
        Err(error) => return Outcome::Fail(first_line(&error.to_string())),
    };
    match run_compiled(&compiled, case, runtime_dirs) {
        Ok(()) => Outcome::Pass,
        Err(reason) => Outcome::Fail(reason),
    }
}

fn run_compiled(
    compiled: &relax_build::CompiledModel,
    case: &Path,
    runtime_dirs: &'static str,
) -> Result<(), String> {
    let signature = leak_signature(&compiled.signature, runtime_dirs)?;
    let weights = match &compiled.weights {
        Some(path) => Some(std::fs::read(path).map_err(|error| error.to_string())?),
        None => None,
    };
    let vm = VirtualMachine::load_file(
        signature,
        &compiled.library,
        weights.as_deref(),
        Device::cpu(),
    )
    .map_err(|error| first_line(&error.to_string()))?;
    let function = vm.function("main").map_err(|error| error.to_string())?;
    let mut data_sets: Vec<PathBuf> = std::fs::read_dir(case)
        .map_err(|error| error.to_string())?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("test_data_set_"))
        })
        .collect();
    data_sets.sort();
    if data_sets.is_empty() {
        return Err("no test_data_set_* folder".to_string());
    }
    for data_set in data_sets {
        let inputs = (0..function.signature().inputs.len())
            .map(|index| onnx_tensor::read(&data_set.join(format!("input_{index}.pb"))))
            .collect::<Result<Vec<Tensor>, String>>()?;
        let references: Vec<&Tensor> = inputs.iter().collect();
        let mut outputs = Vec::new();
        flatten(
            function
                .call(&references)
                .map_err(|error| first_line(&error.to_string()))?,
            &mut outputs,
        );
        let expected_count = (0..)
            .take_while(|index| data_set.join(format!("output_{index}.pb")).is_file())
            .count();
        if outputs.len() != expected_count {
            return Err(format!(
                "{} outputs, expected {expected_count}",
                outputs.len()
            ));
        }
        for (index, actual) in outputs.iter().enumerate() {
            let expected = onnx_tensor::read(&data_set.join(format!("output_{index}.pb")))?;
            compare(index, actual, &expected)?;
        }
    }
    Ok(())
}

fn flatten(output: Output, into: &mut Vec<Tensor>) {
    match output {
        Output::Tensor(tensor) => into.push(tensor),
        Output::Tuple(items) => items.into_iter().for_each(|item| flatten(item, into)),
    }
}

fn compare(index: usize, actual: &Tensor, expected: &Tensor) -> Result<(), String> {
    if actual.dtype() != expected.dtype() {
        return Err(format!(
            "output {index}: dtype {}, expected {}",
            actual.dtype(),
            expected.dtype()
        ));
    }
    if actual.shape() != expected.shape() {
        return Err(format!(
            "output {index}: shape {:?}, expected {:?}",
            actual.shape(),
            expected.shape()
        ));
    }
    let exact = !matches!(
        actual.dtype(),
        DType::F16 | DType::BF16 | DType::F32 | DType::F64
    );
    let actual_values = onnx_tensor::values(actual)?;
    let expected_values = onnx_tensor::values(expected)?;
    for (position, (a, e)) in actual_values.iter().zip(&expected_values).enumerate() {
        let close = if exact {
            a == e
        } else {
            (a.is_nan() && e.is_nan())
                || a == e
                || (a - e).abs() <= ABSOLUTE_TOLERANCE + RELATIVE_TOLERANCE * e.abs()
        };
        if !close {
            return Err(format!(
                "output {index}: element {position} is {a}, expected {e}"
            ));
        }
    }
    Ok(())
}

/// A runtime signature for a model known only at run time (leaked: the runner loads
/// each model once).
fn leak_signature(
    signature: &relax_build::signature::Signature,
    runtime_dirs: &'static str,
) -> Result<&'static ModelSignature, String> {
    let tensors = |tensors: &[relax_build::signature::TensorType]| -> Result<&'static [TensorSignature], String> {
        let converted = tensors
            .iter()
            .map(|tensor| {
                let dtype = DType::parse(&tensor.dtype).ok_or_else(|| format!("dtype {} is not supported", tensor.dtype))?;
                let shape: Vec<Dim> = tensor
                    .shape
                    .iter()
                    .map(|dim| match dim {
                        relax_build::signature::Dim::Static(size) => Dim::Static(*size),
                        relax_build::signature::Dim::Symbolic(text) => Dim::Expression(text.clone().leak()),
                    })
                    .collect();
                Ok(TensorSignature {
                    name: tensor.name.clone().leak(),
                    dtype,
                    shape: shape.leak(),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(converted.leak())
    };
    let functions = signature
        .functions
        .iter()
        .map(|function| {
            Ok(FunctionSignature {
                name: function.name.clone().leak(),
                inputs: tensors(&function.inputs)?,
                weights: tensors(&function.weights)?,
                outputs: tensors(&function.outputs)?,
                returns_tuple: function.returns_tuple,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Box::leak(Box::new(ModelSignature {
        name: signature.model.clone().leak(),
        target: signature.target.clone().leak(),
        functions: functions.leak(),
        runtime_library_dirs: runtime_dirs,
    })))
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}
