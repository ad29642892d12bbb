//! The process boundary with the compile driver (the Python package in `driver/`,
//! shipped in this crate): a typed, versioned request, and a tagged failure report.
//!
//! relax-build writes a [`Request`] as `request.json` into a work folder and runs
//! `python main.py request.json`. On success the driver leaves its outputs in that
//! folder (the library, `signature.json`, maybe `weights.safetensors`, or for an
//! inspection `inspection.json`); on failure it writes `error.json`, a [`Failure`], and
//! exits with status 1. Both sides check [`DRIVER_PROTOCOL`]: a driver and a
//! relax-build of different protocols refuse each other.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::error::{io, Error, Result};
use crate::files;
use crate::text;

/// The compile driver's files: path inside the driver folder, and content.
pub const SOURCES: &[(&str, &str)] = &[
    ("main.py", include_str!("../driver/main.py")),
    (
        "relax_driver/__init__.py",
        include_str!("../driver/relax_driver/__init__.py"),
    ),
    (
        "relax_driver/argument_checks.py",
        include_str!("../driver/relax_driver/argument_checks.py"),
    ),
    (
        "relax_driver/bindings.py",
        include_str!("../driver/relax_driver/bindings.py"),
    ),
    (
        "relax_driver/blocked_layout.py",
        include_str!("../driver/relax_driver/blocked_layout.py"),
    ),
    (
        "relax_driver/build.py",
        include_str!("../driver/relax_driver/build.py"),
    ),
    (
        "relax_driver/errors.py",
        include_str!("../driver/relax_driver/errors.py"),
    ),
    (
        "relax_driver/fast_math.py",
        include_str!("../driver/relax_driver/fast_math.py"),
    ),
    (
        "relax_driver/files.py",
        include_str!("../driver/relax_driver/files.py"),
    ),
    (
        "relax_driver/outputs.py",
        include_str!("../driver/relax_driver/outputs.py"),
    ),
    (
        "relax_driver/onnx_prepare.py",
        include_str!("../driver/relax_driver/onnx_prepare.py"),
    ),
    (
        "relax_driver/offload.py",
        include_str!("../driver/relax_driver/offload.py"),
    ),
    (
        "relax_driver/padded_channels.py",
        include_str!("../driver/relax_driver/padded_channels.py"),
    ),
    (
        "relax_driver/onnx_ops/__init__.py",
        include_str!("../driver/relax_driver/onnx_ops/__init__.py"),
    ),
    (
        "relax_driver/onnx_ops/attention.py",
        include_str!("../driver/relax_driver/onnx_ops/attention.py"),
    ),
    (
        "relax_driver/onnx_ops/common.py",
        include_str!("../driver/relax_driver/onnx_ops/common.py"),
    ),
    (
        "relax_driver/onnx_ops/elementwise.py",
        include_str!("../driver/relax_driver/onnx_ops/elementwise.py"),
    ),
    (
        "relax_driver/onnx_ops/normalization.py",
        include_str!("../driver/relax_driver/onnx_ops/normalization.py"),
    ),
    (
        "relax_driver/onnx_ops/quantized.py",
        include_str!("../driver/relax_driver/onnx_ops/quantized.py"),
    ),
    (
        "relax_driver/onnx_ops/reductions.py",
        include_str!("../driver/relax_driver/onnx_ops/reductions.py"),
    ),
    (
        "relax_driver/onnx_ops/resize.py",
        include_str!("../driver/relax_driver/onnx_ops/resize.py"),
    ),
    (
        "relax_driver/onnx_ops/rotary.py",
        include_str!("../driver/relax_driver/onnx_ops/rotary.py"),
    ),
    (
        "relax_driver/onnx_source.py",
        include_str!("../driver/relax_driver/onnx_source.py"),
    ),
    (
        "relax_driver/public_functions.py",
        include_str!("../driver/relax_driver/public_functions.py"),
    ),
    (
        "relax_driver/schedules.py",
        include_str!("../driver/relax_driver/schedules.py"),
    ),
    (
        "relax_driver/signature.py",
        include_str!("../driver/relax_driver/signature.py"),
    ),
    (
        "relax_driver/sources.py",
        include_str!("../driver/relax_driver/sources.py"),
    ),
    (
        "relax_driver/torch_source.py",
        include_str!("../driver/relax_driver/torch_source.py"),
    ),
    (
        "relax_driver/tune.py",
        include_str!("../driver/relax_driver/tune.py"),
    ),
    (
        "relax_driver/onnx_ops/control_flow.py",
        include_str!("../driver/relax_driver/onnx_ops/control_flow.py"),
    ),
    (
        "relax_driver/onnx_ops/recurrent.py",
        include_str!("../driver/relax_driver/onnx_ops/recurrent.py"),
    ),
    (
        "relax_driver/onnx_ops/shape_values.py",
        include_str!("../driver/relax_driver/onnx_ops/shape_values.py"),
    ),
    (
        "relax_driver/onnx_ops/broadcast.py",
        include_str!("../driver/relax_driver/onnx_ops/broadcast.py"),
    ),
    (
        "relax_driver/onnx_ops/contrib_activations.py",
        include_str!("../driver/relax_driver/onnx_ops/contrib_activations.py"),
    ),
    (
        "relax_driver/onnx_ops/contrib_attention.py",
        include_str!("../driver/relax_driver/onnx_ops/contrib_attention.py"),
    ),
    (
        "relax_driver/onnx_ops/contrib_fused.py",
        include_str!("../driver/relax_driver/onnx_ops/contrib_fused.py"),
    ),
    (
        "relax_driver/onnx_ops/contrib_normalization.py",
        include_str!("../driver/relax_driver/onnx_ops/contrib_normalization.py"),
    ),
    (
        "relax_driver/onnx_ops/contrib_quantized.py",
        include_str!("../driver/relax_driver/onnx_ops/contrib_quantized.py"),
    ),
    (
        "relax_driver/conv1d.py",
        include_str!("../driver/relax_driver/conv1d.py"),
    ),
    (
        "relax_driver/symbolic_order.py",
        include_str!("../driver/relax_driver/symbolic_order.py"),
    ),
    (
        "relax_driver/half_precision.py",
        include_str!("../driver/relax_driver/half_precision.py"),
    ),
    (
        "relax_driver/integer_products.py",
        include_str!("../driver/relax_driver/integer_products.py"),
    ),
    (
        "relax_driver/one_hot.py",
        include_str!("../driver/relax_driver/one_hot.py"),
    ),
    (
        "relax_driver/weight_transforms.py",
        include_str!("../driver/relax_driver/weight_transforms.py"),
    ),
    (
        "relax_driver/devices.py",
        include_str!("../driver/relax_driver/devices.py"),
    ),
    (
        "relax_driver/linking.py",
        include_str!("../driver/relax_driver/linking.py"),
    ),
];

/// The request file name in the work folder.
pub const REQUEST_FILE: &str = "request.json";
/// The failure report file name in the work folder.
pub const ERROR_FILE: &str = "error.json";
/// What an inspection writes.
pub const INSPECTION_FILE: &str = "inspection.json";

/// What the driver does with the model.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Compile and export the library, the signature and (ONNX) the weights.
    Compile,
    /// Tune with meta-schedule, `trials` per task, recording into `work_dir`; on this
    /// machine, or on the device `rpc` names (through TVM's tracker).
    Tune {
        trials: u32,
        work_dir: PathBuf,
        rpc: Option<RpcDevice>,
    },
    /// Import the model and report its functions without compiling (`cargo relax add`).
    Inspect,
}

/// A device registered with TVM's RPC tracker at `host:port` under `key`; a tool waits
/// `wait_seconds` at most for it to be free.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RpcDevice {
    /// The tracker's host.
    pub host: String,
    /// The tracker's port.
    pub port: u16,
    /// The key the device registered under.
    pub key: String,
    /// How long to wait for the device to be free.
    pub wait_seconds: u64,
}

/// One argument of an export spec.
#[derive(Debug, Clone, Serialize)]
pub struct ArgumentSpec {
    pub name: String,
    pub dtype: String,
    /// A size (number) or a symbolic name (string) per dim.
    pub shape: Vec<serde_json::Value>,
}

/// The export spec of one method.
#[derive(Debug, Clone, Serialize)]
pub struct MethodSpec {
    pub method: String,
    pub arguments: Vec<ArgumentSpec>,
}

/// Everything the driver needs, and nothing it reads from elsewhere (no environment).
#[derive(Debug, Clone, Serialize)]
pub struct Request {
    pub protocol: u32,
    /// The apache-tvm version the driver must find (relax-build's pin).
    pub tvm_version: String,
    /// Accept another TVM version (`RELAX_ALLOW_TVM_VERSION`).
    pub allow_other_tvm_version: bool,
    #[serde(flatten)]
    pub action: Action,
    pub model: String,
    pub source: PathBuf,
    /// `python`, `onnx` or `torch_program`.
    pub source_kind: &'static str,
    pub entry: String,
    pub inputs: Vec<MethodSpec>,
    /// The TVM target dict, `mcpu` already resolved (never `native`).
    pub target: serde_json::Value,
    pub cross_compiler: Option<String>,
    pub tuning_records: Option<PathBuf>,
    pub pipeline: &'static str,
    pub tir_pipeline: Option<String>,
    pub opt_level: u8,
    pub offload: bool,
    pub onnx_prepare: bool,
    /// `f32` or `bf16` (the offloaded dense layers').
    pub precision: &'static str,
    /// Whether the target CPU has AMX-BF16's tiles (a bf16 build then leaves no 3x3
    /// layer to float32 Winograd).
    pub matrix_units: bool,
    /// Whether the target CPU runs bf16 products faster than float32's (see
    /// [`crate::target::Bf16Hardware`]): exact integer products of 8-bit values then run
    /// on the bf16 kernels.
    pub fast_bf16: bool,
    /// The model's safetensors file (a torch module's `load_state_dict` reads it).
    pub weights_file: Option<PathBuf>,
    /// `auto`, `embed` or `external` (ONNX initializers).
    pub weights_mode: &'static str,
    pub output_dir: PathBuf,
    pub library_name: &'static str,
    pub signature_name: &'static str,
    pub weights_name: &'static str,
}

/// Every kind of failure the driver reports (`"kind"` in `error.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The request's protocol is not the driver's.
    Protocol,
    /// The Python has another apache-tvm than the pinned one.
    TvmVersion,
    /// The source cannot be imported as a Python file.
    Source,
    /// Running the source raised an exception.
    SourceException,
    /// The source called `sys.exit` (or raised `SystemExit`) while imported.
    SourceExit,
    /// The entry attribute does not exist.
    EntryMissing,
    /// The entry is of a kind that cannot be compiled.
    EntryType,
    /// Constructing the nn module failed.
    EntryConstruct,
    /// An nn module without an input spec.
    InputsMissing,
    /// An input spec for a method the module does not have.
    InputsMethod,
    /// An input spec for an IRModule (which declares its own).
    InputsUnused,
    /// Exporting the nn module with the spec failed.
    Export,
    /// The IRModule has no public Relax function.
    NoFunctions,
    /// The .onnx file is not an ONNX model.
    OnnxInvalid,
    /// TVM's ONNX importer does not support (or failed on) some operators.
    OnnxUnsupported,
    /// TVM's ONNX importer failed otherwise.
    OnnxImport,
    /// The ONNX preparation step (shape folding) failed.
    OnnxPrepare,
    /// A `.pt2` file torch cannot load.
    TorchInvalid,
    /// aten operators TVM's PyTorch importer has no converter for (`operators`).
    TorchUnsupported,
    /// A torch module's weights file does not match its state dict (missing or
    /// unexpected keys).
    WeightsKeys,
    /// The manifest's input spec contradicts the ONNX graph.
    InputsContradiction,
    /// An argument or output is not a tensor of known rank.
    UnsupportedType,
    /// The pipeline name is unknown.
    Pipeline,
    /// A tuning-record file is malformed.
    TuningRecords,
    /// Tuning was asked for a model with symbolic dims.
    TuningSymbolic,
    /// The device to tune on is not at its tracker (`cargo relax tune --rpc`).
    TuningDevice,
    /// Computing what the graph derives from weights alone failed (weight_transforms.py).
    Weights,
    /// `tvm.compile` failed.
    Compile,
    /// Linking the exported library failed.
    Link,
    /// A bug in the driver or in TVM.
    Internal,
}

/// The driver's failure report.
#[derive(Debug, Clone, Deserialize)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
    #[serde(default)]
    pub detail: String,
    /// The method or argument the failure is about, when there is one.
    #[serde(default)]
    pub subject: Option<String>,
    /// Unsupported operators, by op type, with their count and first nodes.
    #[serde(default)]
    pub operators: Vec<UnsupportedOperator>,
}

/// One operator TVM's ONNX importer cannot import.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct UnsupportedOperator {
    pub op_type: String,
    pub count: usize,
    pub nodes: Vec<String>,
    /// Why: `unsupported` (no converter), `onnxruntime-only contrib operator` (no
    /// converter, domain com.microsoft) or the importer's error for this op.
    pub reason: String,
}

/// How a driver run ended.
pub enum Outcome {
    Success,
    /// The driver reported a failure in `error.json`.
    Failed(Failure),
    /// The driver died without a report (exit status and the tail of stderr).
    Crashed {
        status: String,
        stderr: String,
    },
}

/// The sha256 over every driver file's path and content: the driver's version.
pub fn fingerprint() -> String {
    let mut all = Vec::new();
    for (path, content) in SOURCES {
        all.extend_from_slice(path.as_bytes());
        all.push(0);
        all.extend_from_slice(content.as_bytes());
        all.push(0);
    }
    files::sha256_bytes(&all)
}

/// Writes the driver into `dir/<fingerprint>/` (once per driver version) and returns
/// the path of its entry point, `main.py`.
pub fn install(dir: &Path) -> Result<PathBuf> {
    let root = dir.join(&fingerprint()[..16]);
    let main = root.join(SOURCES[0].0);
    if main.is_file() {
        return Ok(main);
    }
    let temporary = dir.join(format!("{}.tmp", files::unique_suffix()));
    for (path, content) in SOURCES {
        let file = temporary.join(path);
        let parent = file.parent().expect("driver files are in a folder");
        std::fs::create_dir_all(parent).map_err(io(format!("creating {}", parent.display())))?;
        std::fs::write(&file, content).map_err(io(format!("writing {}", file.display())))?;
    }
    if std::fs::rename(&temporary, &root).is_err() {
        // Another build installed the same driver first.
        let _ = std::fs::remove_dir_all(&temporary);
    }
    if main.is_file() {
        Ok(main)
    } else {
        Err(Error::Io {
            context: format!("installing the compile driver into {}", root.display()),
            source: std::io::Error::other(
                "the driver's entry point is missing after installing it",
            ),
        })
    }
}

/// Runs the driver at `script` with `python` (a command running the toolchain's Python)
/// on `request`; with `inherit_output` the driver's output goes straight to this
/// process's (progress of a tuning run).
pub fn run(
    mut python: Command,
    script: &Path,
    request: &Request,
    inherit_output: bool,
) -> Result<Outcome> {
    let dir = &request.output_dir;
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let request_path = dir.join(REQUEST_FILE);
    let error_path = dir.join(ERROR_FILE);
    let _ = std::fs::remove_file(&error_path);
    let text = serde_json::to_string_pretty(request).expect("requests serialize");
    files::write_atomically(&request_path, text.as_bytes())?;
    let shown = Path::new(python.get_program()).display().to_string();
    let command = python.arg(script).arg(&request_path);
    let cannot_run = |error: std::io::Error| Error::Toolchain {
        message: format!("cannot run {shown}: {error}"),
    };
    let (status, stderr) = if inherit_output {
        (command.status().map_err(cannot_run)?, Vec::new())
    } else {
        let output = command.output().map_err(cannot_run)?;
        (output.status, output.stderr)
    };
    let _ = std::fs::remove_file(&request_path);
    if status.success() {
        return Ok(Outcome::Success);
    }
    let report = std::fs::read(&error_path)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Failure>(&bytes).ok());
    let _ = std::fs::remove_file(&error_path);
    Ok(match report {
        Some(failure) => Outcome::Failed(failure),
        None => Outcome::Crashed {
            status: status.to_string(),
            stderr: text::last_lines(&String::from_utf8_lossy(&stderr), 30),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `DriverError("<kind>", ...)` the driver can raise is a known kind.
    use crate::versions::DRIVER_PROTOCOL;

    #[test]
    fn every_failure_kind_the_driver_raises_is_known() {
        let mut kinds = Vec::new();
        let all: String = SOURCES.iter().map(|(_, content)| *content).collect();
        for part in all.split("DriverError(").skip(1) {
            let part = part.trim_start();
            if let Some(rest) = part.strip_prefix('"') {
                kinds.push(rest.split('"').next().unwrap().to_string());
            }
        }
        kinds.extend(["internal".to_string(), "source_exit".to_string()]);
        kinds.sort();
        kinds.dedup();
        assert!(kinds.len() > 15, "found only {kinds:?}");
        for kind in kinds {
            let json = format!(r#"{{"kind": "{kind}", "message": "m"}}"#);
            let failure: Failure = serde_json::from_str(&json).unwrap_or_else(|error| {
                panic!("the driver's kind `{kind}` is unknown to relax-build: {error}")
            });
            assert_eq!(failure.message, "m");
        }
    }

    #[test]
    fn every_driver_file_is_shipped() {
        let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("driver");
        for entry in walkdir::WalkDir::new(&folder) {
            let path = entry.unwrap().into_path();
            if path.extension().is_some_and(|ext| ext == "py")
                && !path.starts_with(folder.join("tests"))
            {
                let relative = path
                    .strip_prefix(&folder)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                assert!(
                    SOURCES.iter().any(|(name, _)| *name == relative),
                    "{relative} is not in driver::SOURCES"
                );
            }
        }
    }

    #[test]
    fn the_driver_checks_the_same_protocol() {
        assert!(
            SOURCES[0]
                .1
                .contains(&format!("PROTOCOL = {DRIVER_PROTOCOL}\n")),
            "main.py must declare PROTOCOL = {DRIVER_PROTOCOL}"
        );
    }

    #[test]
    fn requests_carry_the_action_tag_at_the_top() {
        let request = Request {
            protocol: DRIVER_PROTOCOL,
            tvm_version: "0.27.0.post1".to_string(),
            allow_other_tvm_version: false,
            action: Action::Tune {
                trials: 8,
                work_dir: PathBuf::from("/records"),
                rpc: None,
            },
            model: "m".to_string(),
            source: PathBuf::from("/m.py"),
            source_kind: "python",
            entry: "M".to_string(),
            inputs: Vec::new(),
            target: serde_json::json!({"kind": "llvm"}),
            cross_compiler: None,
            tuning_records: None,
            pipeline: "zero",
            tir_pipeline: None,
            opt_level: 3,
            offload: true,
            onnx_prepare: true,
            precision: "f32",
            matrix_units: false,
            fast_bf16: false,
            weights_file: None,
            weights_mode: "auto",
            output_dir: PathBuf::from("/out"),
            library_name: "library.so",
            signature_name: "signature.json",
            weights_name: "weights.safetensors",
        };
        let json = serde_json::to_value(&request).unwrap();
        assert_eq!(json["action"], "tune");
        assert_eq!(json["trials"], 8);
        assert_eq!(json["protocol"], DRIVER_PROTOCOL);
    }
}
